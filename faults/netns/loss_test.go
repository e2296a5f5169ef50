package netns_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults/netns"
	"golang.org/x/sys/unix"
)

// lossProbe sends n datagrams from one end of l to a UDP socket at the
// other, then an end marker with the loss off, and returns how many of
// the n arrived. Datagrams across a veth arrive in order, so once the
// marker has arrived every earlier datagram has arrived or been dropped.
func lossProbe(t *testing.T, l *netns.Link, from, to *netns.Node, toAddr netip.Addr, pct float64, n int) int {
	t.Helper()
	ln, err := to.ListenPacket("udp", net.JoinHostPort(toAddr.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Room for every datagram even when the receiver is not scheduled
	// for a while (a loaded machine lost 28 of 2000 with no loss set, at
	// the default 208 KiB): as root, past net.core.rmem_max.
	if err := forceReadBuffer(ln, 16<<20); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 64)
		count := 0
		for {
			k, _, err := ln.ReadFrom(buf)
			if err != nil {
				got <- -1
				return
			}
			if string(buf[:k]) == "end" {
				got <- count
				return
			}
			count++
		}
	}()
	if err := l.Loss(pct); err != nil {
		t.Fatal(err)
	}
	c, err := from.DialContext(t.Context(), "udp", ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		if _, err := c.Write([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		if i%100 == 99 {
			// Paced: the receiver's buffer, not the rule, must not be
			// what drops them.
			time.Sleep(time.Millisecond)
		}
	}
	if err := l.Loss(0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("end")); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-got:
		if k < 0 {
			t.Fatal("the receiver failed")
		}
		return k
	case <-time.After(30 * time.Second):
		t.Fatal("the end marker did not arrive within 30 s with the loss off")
	}
	return 0
}

// Loss drops about its share of the packets in each direction, without
// sch_netem (nftables' numgen in the namespace), and none once it is 0:
// root → namespace and namespace → root, 2000 datagrams each way.
func TestLossDropsItsShareEachWay(t *testing.T) {
	needNet(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft here (apt-get install nftables)")
	}
	n, err := netns.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	app, err := n.Node("app1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := n.Link(n.Root(), app)
	if err != nil {
		t.Fatal(err)
	}
	const sent = 2000
	for _, tc := range []struct {
		name     string
		from, to *netns.Node
		at       netip.Addr
	}{{"root to namespace", n.Root(), app, l.AddrB()}, {"namespace to root", app, n.Root(), l.AddrA()}} {
		began := time.Now()
		if got := lossProbe(t, l, tc.from, tc.to, tc.at, 0, sent); got != sent {
			t.Errorf("%s, no loss: %d of %d arrived", tc.name, got, sent)
		}
		got := lossProbe(t, l, tc.from, tc.to, tc.at, 30, sent)
		lost := float64(sent-got) / sent * 100
		// 30% of 2000: the standard deviation is about 1%.
		if lost < 24 || lost > 36 {
			t.Errorf("%s, loss 30%%: %.1f%% lost (%d of %d arrived), want 24–36%%", tc.name, lost, got, sent)
		}
		t.Logf("%s: loss 30%%: %.1f%% lost; both probes in %s", tc.name, lost, time.Since(began).Round(time.Millisecond))
	}
	if err := l.Delay(time.Millisecond); err != nil && !errors.Is(err, netns.ErrNoNetem) {
		t.Errorf("delay: %v", err)
	} else if err != nil {
		t.Logf("delay: %v", err)
	}
}

// forceReadBuffer sets the socket's receive buffer with SO_RCVBUFFORCE,
// which root may set beyond net.core.rmem_max.
func forceReadBuffer(c net.PacketConn, n int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	return serr
}
