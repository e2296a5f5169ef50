package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/postgres"
)

// replLink is a pair's replication through a network of the run's own
// (chaos --partition=standby): the primary also listens on the root end
// of a veth link (A), a relay in the link's namespace listens on its far
// end (B) and dials A, and the standby streams from B. Both legs of the
// replication connection cross the link, so cutting it (ip link set A
// down) drops every packet between the primary and its standby, in
// silence, as a partition does, while the app still reaches the primary
// on 127.0.0.1. Both postmasters stay in the root namespace, where the
// supervisor starts them.
type replLink struct {
	net   *netns.Net
	node  *netns.Node
	link  *netns.Link
	relay *netns.Forwarder
}

func newReplLink(stateDir string) (*replLink, error) {
	if stateDir == "" {
		return nil, errors.New("a partition between the primary and its standby needs PairOptions.NetnsDir")
	}
	n, err := netns.New(stateDir)
	if err != nil {
		return nil, err
	}
	r := &replLink{net: n}
	if r.node, err = n.Node("repl"); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	if r.link, err = n.Link(n.Root(), r.node); err != nil {
		return nil, errors.Join(err, n.Close())
	}
	return r, nil
}

// route starts the relay to the primary's port on A and points the
// standby at it.
func (r *replLink) route(ctx context.Context, pair *postgres.Pair) error {
	primary, _ := pair.Ports()
	var err error
	r.relay, err = r.node.Forward(net.JoinHostPort(r.link.AddrB().String(), "0"), net.JoinHostPort(r.link.AddrA().String(), strconv.Itoa(primary)))
	if err != nil {
		return fmt.Errorf("the replication relay: %w", err)
	}
	at := r.relay.Addr()
	if err := pair.ReceiveFrom(ctx, at.Addr().String(), int(at.Port())); err != nil {
		return fmt.Errorf("pointing the standby at the replication relay: %w", err)
	}
	return nil
}

// Close stops the relay and removes the network.
func (r *replLink) Close() error {
	var err error
	if r.relay != nil {
		err = r.relay.Close()
	}
	return errors.Join(err, r.net.Close())
}
