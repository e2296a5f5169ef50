package postgres

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// checkListen refuses addresses and networks that are not plain IPs and
// CIDRs: they end up in postgresql's command line and in pg_hba.conf.
func checkListen(addrs, clients []string) error {
	for _, a := range addrs {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("listen address %q is not an IP address", a)
		}
	}
	for _, c := range clients {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("client network %q is not a CIDR such as 169.254.12.0/24", c)
		}
	}
	return nil
}

// hbaWithClients writes, in the slot's tmp directory, the pg_hba.conf of
// the cluster in dataDir with password lines for each of the clients'
// networks (for its databases, and for replication: a pair's standby may
// stream through the run's network), and returns its path: the cached
// cluster's own file stays as it was, so a later run in the slot does not
// inherit this one's network.
func (sv *supervisor) hbaWithClients(dataDir string) (string, error) {
	if err := checkListen(sv.cfg.Listen, sv.cfg.Clients); err != nil {
		return "", err
	}
	orig, err := os.ReadFile(filepath.Join(dataDir, "pg_hba.conf"))
	if err != nil {
		return "", fmt.Errorf("reading the cluster's pg_hba.conf: %v", err)
	}
	var b strings.Builder
	b.Write(orig)
	b.WriteString("\n# this run's private network (Options.AllowClients)\n")
	for _, c := range sv.cfg.Clients {
		fmt.Fprintf(&b, "host all all %s password\n", c)
		fmt.Fprintf(&b, "host replication all %s password\n", c)
	}
	path := filepath.Join(sv.tmpDir(), "pg_hba.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
