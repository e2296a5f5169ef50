package postgres

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DefaultConnectTimeout bounds every connection to a server at
// --database-url / DATABASE_URL whose URL sets no connect_timeout (nor
// PGCONNECT_TIMEOUT): without it, a port that accepts and never answers
// (a firewall, a server of another protocol waiting for more) hangs
// bank-sim for good. Whole seconds: libpq's connect_timeout is.
var DefaultConnectTimeout = 10 * time.Second

var connectTimeoutKW = regexp.MustCompile(`(^|\s)connect_timeout\s*=`)

// withConnectTimeout returns conn, a URL or a keyword/value connection
// string, with connect_timeout set to DefaultConnectTimeout unless it sets
// one already. Every URL derived from it (a scenario database's, the owner
// lock's) inherits it.
func withConnectTimeout(conn string) string {
	if os.Getenv("PGCONNECT_TIMEOUT") != "" {
		return conn
	}
	secs := strconv.Itoa(max(1, int(DefaultConnectTimeout/time.Second)))
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return conn // ParseConfig says what is wrong with it
		}
		q := u.Query()
		if q.Has("connect_timeout") {
			return conn
		}
		q.Set("connect_timeout", secs)
		u.RawQuery = q.Encode()
		return u.String()
	}
	if connectTimeoutKW.MatchString(conn) {
		return conn
	}
	return strings.TrimSpace(conn + " connect_timeout=" + secs)
}

// reachError says, in the user's words, why the server at cfg could not
// be connected to: which host, what happened, what to check; never a
// driver's internals. It wraps ErrUnavailable.
func reachError(cfg *pgx.ConnConfig, err error) error {
	where := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	const check = "check DATABASE_URL / --database-url"
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// The server answered: its own words are the user's.
		return unavailable("PostgreSQL at %s refused the connection: %s; %s (user, password, database name)", where, pe.Message, check)
	}
	var why string
	var dns *net.DNSError
	var op *net.OpError
	var cert *tls.CertificateVerificationError
	switch {
	case pgconn.Timeout(err) || errors.Is(err, os.ErrDeadlineExceeded):
		why = fmt.Sprintf("no answer within %s (connect_timeout); is the host up, the port PostgreSQL's (a web server, say, waits in silence for a request), no firewall in the way?", cfg.ConnectTimeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused: nothing listens on that port; is PostgreSQL running, and is the port right?"
	case errors.As(err, &dns):
		why = fmt.Sprintf("the host name %q does not resolve", cfg.Host)
	case errors.As(err, &op) && op.Op == "dial":
		why = fmt.Sprintf("cannot connect: %v", op.Err)
	case errors.As(err, &cert) || strings.Contains(err.Error(), "x509: "):
		why = "the TLS handshake failed (the server's certificate); check sslmode and the certificates in the URL"
	case cfg.TLSConfig != nil && len(cfg.Fallbacks) == 0 && strings.Contains(err.Error(), "server refused TLS connection"):
		why = "the server does not accept TLS, which sslmode in the URL requires (or it is not PostgreSQL)"
	default:
		why = "the server answered, but it does not speak PostgreSQL's protocol (is this port an HTTP server, or another service?)"
	}
	return unavailable("could not reach PostgreSQL at %s: %s; %s", where, why, check)
}
