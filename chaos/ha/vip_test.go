package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// vip is a virtual IP as a team's load balancer gives one: one address
// whose connections go to whichever server it points at now. Moving it
// drops the connections it carried, as a moved address does.
type vip struct {
	ln       net.Listener
	upstream atomic.Value // string, host:port

	mu    sync.Mutex
	conns []net.Conn
}

func startVIP(t *testing.T, upstream string) *vip {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	v := &vip{ln: ln}
	v.upstream.Store(upstream)
	t.Cleanup(func() { ln.Close(); v.drop() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go v.carry(c)
		}
	}()
	return v
}

func (v *vip) carry(c net.Conn) {
	u, err := net.DialTimeout("tcp", v.upstream.Load().(string), 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	v.mu.Lock()
	v.conns = append(v.conns, c, u)
	v.mu.Unlock()
	go func() { io.Copy(u, c); u.Close() }()
	io.Copy(c, u)
	c.Close()
}

// move points the address at upstream and drops what it carried.
func (v *vip) move(upstream string) {
	v.upstream.Store(upstream)
	v.drop()
}

func (v *vip) drop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.conns {
		c.Close()
	}
	v.conns = nil
}

func (v *vip) port() int { return v.ln.Addr().(*net.TCPAddr).Port }

// A team reaches its cluster through one address (a virtual IP), so the
// URL lists one host. Someone fails the cluster over during a run with
// no failover flag: the address now leads to the promoted standby. The
// run still sees the change of primary, on the next timeline at the same
// address, and reports it: never silent.
func TestAFailoverBehindOneAddressIsReported(t *testing.T) {
	pgtest.Exhaustive(t)
	ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute,
		errors.New("a chaos run through a failover behind a virtual IP did not finish within 3 minutes"))
	defer cancel()
	pair, err := postgres.StartPair(ctx, postgres.Options{}, postgres.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	primary, standby := pair.Ports()
	v := startVIP(t, fmt.Sprintf("127.0.0.1:%d", primary))
	url := pair.URL("postgres") + fmt.Sprintf(" host=127.0.0.1 port=%d", v.port())
	if n := postgres.HostCount(url); n != 1 {
		t.Fatalf("the URL lists %d hosts, want one (the virtual IP)", n)
	}
	srv, err := postgres.Start(ctx, postgres.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	cfg := chaos.Config{Seed: pairSeed, Clients: 4, Intents: 400, Faults: chaos.Rates{}}.WithDefaults()
	failed := make(chan error, 1)
	var once sync.Once
	opts := chaos.Options{AtIntent: func(_ context.Context, i int) {
		if i == cfg.CrashIntent() {
			once.Do(func() {
				go func() {
					if err := pair.KillPrimary(ctx); err != nil {
						failed <- err
						return
					}
					v.move(fmt.Sprintf("127.0.0.1:%d", standby))
					failed <- pair.Promote(ctx)
				}()
			})
		}
	}}
	h, err := ha.RunExternal(ctx, banks.OnServer(srv, banks.Options{}), cfg, opts, ha.ExternalOptions{WatchURL: srv.AdminURL()})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-failed; err != nil {
		t.Fatal(err)
	}
	if w := h.PrimaryWatched; w == nil || w.Host != fmt.Sprintf("127.0.0.1:%d", v.port()) {
		t.Errorf("the history's watched primary: %+v, want the virtual IP's address", w)
	}
	res := chaos.Check(h)
	if len(res.PrimaryChanges) != 1 {
		t.Fatalf("primary changes: %+v, want one: the failover behind the address went unreported", res.PrimaryChanges)
	}
	pc := res.PrimaryChanges[0]
	addr := fmt.Sprintf("127.0.0.1:%d", v.port())
	if pc.From != addr || pc.To != addr || pc.Cause != chaos.CauseUnannounced {
		t.Errorf("the change: %s → %s (%s), want %s → %s (%s)", pc.From, pc.To, pc.Cause, addr, addr, chaos.CauseUnannounced)
	}
	if pc.ToTimeline != pc.FromTimeline+1 {
		t.Errorf("timelines %d → %d, want the next one after the promotion", pc.FromTimeline, pc.ToTimeline)
	}
	if !strings.Contains(pc.Line(), "timeline") {
		t.Errorf("the change's line does not name the timeline, the only thing that changed: %s", pc.Line())
	}
	t.Logf("%s", pc.Line())
}
