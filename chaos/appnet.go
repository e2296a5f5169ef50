package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/banksim/bank-sim/faults/netns"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AppNet is an HTTP run's server copies in network namespaces of the
// run's own (faults/netns): copy k lives in namespace app<k+1>, reached by
// the run's fault proxy over a front link and reaching PostgreSQL, in the
// root namespace, over a db link that a Partition cuts.
type AppNet struct {
	Net   *netns.Net
	Nodes []*netns.Node
	Front []*netns.Link
	DB    []*netns.Link
	// Setup is how long the namespaces and links took to make.
	Setup time.Duration

	pools []*pgxpool.Pool
}

// Copy connection bounds: a cut link answers nothing, so a new connection
// gives up after partitionConnect, and a copy cut off from PostgreSQL
// answers 500 after partitionWork (idem.Handler.WorkTimeout), so that the
// client retries elsewhere.
const (
	partitionConnect = 10 * time.Second
	partitionWork    = 3 * time.Second
)

// NewAppNet makes a network for instances server copies, recorded under
// stateDir (netns.StateDir of the cache directory, where bank-sim prune
// looks). On an error, what it made is removed.
func NewAppNet(stateDir string, instances int) (*AppNet, error) {
	began := time.Now()
	n, err := netns.New(stateDir)
	if err != nil {
		return nil, err
	}
	a := &AppNet{Net: n}
	for k := range instances {
		node, err := n.Node(fmt.Sprintf("app%d", k+1))
		if err != nil {
			return nil, errors.Join(err, n.Close())
		}
		front, err := n.Link(n.Root(), node)
		if err != nil {
			return nil, errors.Join(err, n.Close())
		}
		db, err := n.Link(n.Root(), node)
		if err != nil {
			return nil, errors.Join(err, n.Close())
		}
		a.Nodes, a.Front, a.DB = append(a.Nodes, node), append(a.Front, front), append(a.DB, db)
	}
	a.Setup = time.Since(began)
	return a, nil
}

// ListenAddresses are the addresses PostgreSQL must listen on besides
// 127.0.0.1 (postgres.Options.ListenAddresses): each db link's root end.
func (a *AppNet) ListenAddresses() []string {
	var out []string
	for _, l := range a.DB {
		out = append(out, l.AddrA().String())
	}
	return out
}

// Clients is the network PostgreSQL must take logins from
// (postgres.Options.AllowClients): the run's subnet.
func (a *AppNet) Clients() []string { return []string{a.Net.Subnet().String()} }

// Hosts are the copies' hosts (Options.Hosts): each listens on its front
// link and reaches the bank's database at dbURL over its db link, with a
// pool of conns connections opened now. Close closes the pools.
func (a *AppNet) Hosts(ctx context.Context, dbURL string, conns int32) ([]Host, error) {
	var hosts []Host
	for k, node := range a.Nodes {
		host, pool, err := NamespacedHost(ctx, node, a.Front[k].AddrB(), a.DB[k].AddrA(), dbURL, conns, partitionConnect, partitionWork)
		if err != nil {
			return nil, err
		}
		a.pools = append(a.pools, pool)
		hosts = append(hosts, host)
	}
	return hosts, nil
}

// Close closes the copies' pools and removes the namespaces and links.
func (a *AppNet) Close() error {
	for _, p := range a.pools {
		p.Close()
	}
	a.pools = nil
	return a.Net.Close()
}
