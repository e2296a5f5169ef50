package netns

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Forwarder relays TCP connections inside a node: what it accepts on its
// address there, it joins to a connection it dials from there. A process
// of the root namespace that reaches another of the root namespace through
// a Forwarder on a link's far end crosses the link twice, so a Cut of the
// link cuts it: how a pair's standby, which PostgreSQL starts in the root
// namespace, is partitioned from its primary.
type Forwarder struct {
	ln   net.Listener
	node *Node
	to   string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// forwardDialTimeout bounds each dial of the far side: a cut link answers
// nothing.
const forwardDialTimeout = 10 * time.Second

// Forward listens on addr (an IP literal and port, 0 for any) inside the
// node and relays each connection to to, dialled from inside the node.
func (nd *Node) Forward(addr, to string) (*Forwarder, error) {
	ln, err := nd.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln, node: nd, to: to, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr is the address it listens on.
func (f *Forwarder) Addr() netip.AddrPort {
	return f.ln.Addr().(*net.TCPAddr).AddrPort()
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// track adds c to the open connections, or closes it if f is closed.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

func (f *Forwarder) relay(in net.Conn) {
	defer f.wg.Done()
	if !f.track(in) {
		return
	}
	defer f.untrack(in)
	ctx, cancel := context.WithTimeout(context.Background(), forwardDialTimeout)
	out, err := f.node.DialContext(ctx, "tcp", f.to)
	cancel()
	if err != nil || !f.track(out) {
		return
	}
	defer f.untrack(out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done // one side ended: end both (the deferred closes)
}

// Close stops listening and closes every relayed connection.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}
