package postgres

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A --database-url may list several hosts (host=a,b port=1,2, or
// postgres://a:1,b:2/…), as a team with a primary and standbys writes it,
// with target_session_attrs=read-write so that a connection lands on
// whichever is primary. pgx tries them in order, and moves on from a host
// that is read-only, but not from one that says the database does not
// exist (3D000), as libpq does not either. A standby listed first is then
// fatal right after bank-sim creates a database on the primary: the
// standby has not replayed it yet, says so, and the connection stops
// there. So once the first connection has found a host, every later one
// tries that host first, and the others after it: the run's databases are
// reached where they were created, and a failover still moves the
// connections on to the next host that takes writes.

// hostPort is one host of a connection string.
type hostPort struct {
	host string
	port uint16
}

func (h hostPort) String() string { return net.JoinHostPort(h.host, strconv.Itoa(int(h.port))) }

// hostsOf lists the hosts of cfg in the order pgx tries them, each once
// (pgx lists a host twice for sslmode=prefer, with TLS and without).
func hostsOf(cfg *pgx.ConnConfig) []hostPort {
	hosts := []hostPort{{cfg.Host, cfg.Port}}
	for _, f := range cfg.Fallbacks {
		h := hostPort{f.Host, f.Port}
		if h != hosts[len(hosts)-1] {
			hosts = append(hosts, h)
		}
	}
	out := hosts[:0]
	seen := map[hostPort]bool{}
	for _, h := range hosts {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// connectedHost returns which of hosts conn is connected to, by its peer's
// address (a host name is resolved to compare); ok is false when none
// matches (a proxy, a name that resolves differently now).
func connectedHost(ctx context.Context, conn *pgx.Conn, hosts []hostPort) (hostPort, bool) {
	peer := conn.PgConn().Conn().RemoteAddr()
	if peer.Network() == "unix" {
		// pgx dials <dir>/.s.PGSQL.<port>.
		for _, h := range hosts {
			if peer.String() == fmt.Sprintf("%s/.s.PGSQL.%d", strings.TrimSuffix(h.host, "/"), h.port) {
				return h, true
			}
		}
		return hostPort{}, false
	}
	ip, portStr, err := net.SplitHostPort(peer.String())
	if err != nil {
		return hostPort{}, false
	}
	port, _ := strconv.Atoi(portStr)
	for _, h := range hosts {
		if int(h.port) != port {
			continue
		}
		if h.host == ip {
			return h, true
		}
		if addrs, err := net.DefaultResolver.LookupHost(ctx, h.host); err == nil {
			for _, a := range addrs {
				if net.ParseIP(a).Equal(net.ParseIP(ip)) {
					return h, true
				}
			}
		}
	}
	return hostPort{}, false
}

// withHostsFirst returns conn, a URL or keyword/value connection string,
// with its hosts in the order given (the one found first), everything
// else kept.
func withHostsFirst(conn string, order []hostPort) string {
	hosts := make([]string, len(order))
	ports := make([]string, len(order))
	for i, h := range order {
		hosts[i], ports[i] = h.host, strconv.Itoa(int(h.port))
	}
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		if u, err := url.Parse(conn); err == nil {
			q := u.Query()
			if q.Has("host") {
				q.Set("host", strings.Join(hosts, ","))
				q.Set("port", strings.Join(ports, ","))
				u.RawQuery = q.Encode()
				return u.String()
			}
			hp := make([]string, len(order))
			for i, h := range order {
				hp[i] = h.String()
			}
			u.Host = strings.Join(hp, ",")
			return u.String()
		}
	}
	// Later keywords win in keyword/value strings.
	return conn + " host=" + strings.Join(hosts, ",") + " port=" + strings.Join(ports, ",")
}

// pinHost finds which of cfg's hosts conn reached and returns url with
// that host first, the host, and, with several, which one it was and why
// ("; host 2 of 2, by target_session_attrs=read-write"), for the header.
// With one host, url is returned as it is.
func pinHost(ctx context.Context, url string, cfg *pgx.ConnConfig, conn *pgx.Conn) (pinned, where, which string) {
	hosts := hostsOf(cfg)
	where = hosts[0].String()
	if len(hosts) < 2 {
		return url, where, ""
	}
	used, ok := connectedHost(ctx, conn, hosts)
	if !ok {
		return url, conn.PgConn().Conn().RemoteAddr().String(), fmt.Sprintf("; one of %d hosts, which the address does not say", len(hosts))
	}
	order := []hostPort{used}
	n := 0
	for i, h := range hosts {
		if h == used {
			n = i + 1
		} else {
			order = append(order, h)
		}
	}
	why := "the first that answered"
	if attrs := targetSessionAttrs(url); attrs != "" {
		why = "target_session_attrs=" + attrs
	}
	return withHostsFirst(url, order), used.String(), fmt.Sprintf("; host %d of %d, by %s", n, len(hosts), why)
}

// targetSessionAttrs reads target_session_attrs from a connection string
// (pgx consumes it into a validation function, not a runtime parameter).
func targetSessionAttrs(conn string) string {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		if u, err := url.Parse(conn); err == nil {
			return u.Query().Get("target_session_attrs")
		}
		return ""
	}
	for _, f := range strings.Fields(conn) {
		if v, ok := strings.CutPrefix(f, "target_session_attrs="); ok {
			return v
		}
	}
	return ""
}

// ConnectedHost names the server conn reached: the host:port of its
// connection string's hosts that it is connected to, else the peer's
// address.
func ConnectedHost(ctx context.Context, conn *pgx.Conn) string {
	if h, ok := connectedHost(ctx, conn, hostsOf(conn.Config())); ok {
		return h.String()
	}
	return conn.PgConn().Conn().RemoteAddr().String()
}

// HostCount is how many hosts a connection string lists (0 when it does
// not parse): more than one is a cluster whose primary may change.
func HostCount(conn string) int {
	cfg, err := pgx.ParseConfig(conn)
	if err != nil {
		return 0
	}
	return len(hostsOf(cfg))
}
