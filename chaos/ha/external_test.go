package ha_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// teamCluster is a team's cluster, as bank-sim's own pair stands in for
// it: reached only through a multi-host URL with the standby listed first,
// and failed over through an HTTP endpoint (the primary killed, the
// standby promoted), as patronictl asks Patroni's REST API. cmd is a bash
// command that asks it; failover asks it directly.
type teamCluster struct {
	srv              *postgres.Server
	primary, standby int
	cmd              string
	failover         func() error
}

func startTeamCluster(t *testing.T, ctx context.Context) *teamCluster {
	t.Helper()
	pair, err := postgres.StartPair(ctx, postgres.Options{}, postgres.PairOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	tc := &teamCluster{}
	tc.primary, tc.standby = pair.Ports()
	// Later keywords win: the standby first.
	url := pair.URL("postgres") + fmt.Sprintf(" host=127.0.0.1,127.0.0.1 port=%d,%d", tc.standby, tc.primary)
	if tc.srv, err = postgres.Start(ctx, postgres.Options{URL: url}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.srv.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := pair.KillPrimary(r.Context()); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if err := pair.Promote(r.Context()); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "promoted 127.0.0.1:%d\n", tc.standby)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	endpoint := ln.Addr().String()
	tc.cmd = fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && printf "POST /failover HTTP/1.0\r\n\r\n" >&3 && cat <&3'`, ln.Addr().(*net.TCPAddr).Port)
	tc.failover = func() error {
		resp, err := http.Post("http://"+endpoint+"/failover", "text/plain", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("the failover endpoint answered %s", resp.Status)
		}
		return nil
	}
	return tc
}

// checkChange checks that res has one change of primary, from the
// cluster's primary to its standby, on the next timeline, by cause, with
// an unavailability window, and that every intent settled.
func (tc *teamCluster) checkChange(t *testing.T, cfg chaos.Config, res chaos.Result, cause string) chaos.PrimaryChangeResult {
	t.Helper()
	if len(res.PrimaryChanges) != 1 {
		t.Fatalf("primary changes: %+v, want one", res.PrimaryChanges)
	}
	pc := res.PrimaryChanges[0]
	from, to := fmt.Sprintf("127.0.0.1:%d", tc.primary), fmt.Sprintf("127.0.0.1:%d", tc.standby)
	if pc.From != from || pc.To != to || pc.Cause != cause {
		t.Errorf("the change: %s → %s (%s), want %s → %s (%s)", pc.From, pc.To, pc.Cause, from, to, cause)
	}
	if pc.FromTimeline < 1 || pc.ToTimeline != pc.FromTimeline+1 {
		t.Errorf("timelines %d → %d, want the next one after a promotion", pc.FromTimeline, pc.ToTimeline)
	}
	if !(pc.LastSeenNs <= pc.LostNs && pc.LostNs <= pc.SeenNs) {
		t.Errorf("the change's times out of order: last seen %d, lost %d, seen %d", pc.LastSeenNs, pc.LostNs, pc.SeenNs)
	}
	if pc.LastAckNs < 0 || pc.FirstAckNs <= pc.LastAckNs {
		t.Errorf("unavailability window: last acknowledged %d, first after %d; want both, in order (the workload went on)", pc.LastAckNs, pc.FirstAckNs)
	}
	// More than planned when the workload had to go on until the new
	// primary acknowledged a transfer (Options.KeepGoing).
	if res.Stats.Intents < cfg.Intents || res.ByKind[chaos.KindUnresolved] != 0 {
		t.Errorf("%d intents of %d planned, %d unresolved: healing after the failover did not settle them all", res.Stats.Intents, cfg.Intents, res.ByKind[chaos.KindUnresolved])
	}
	t.Logf("%s", pc.Line())
	return pc
}

// The team's own failover command, run at the seeded intent: the run sees
// the primary change from the old host to the promoted one, on the next
// timeline, keeps the workload going through it, heals after, and keeps
// the command's output.
func TestFailoverCmdOnATeamsCluster(t *testing.T) {
	// Exhaustive: the window needs the workload to outlast the team's
	// command, which on a quiet machine 60 intents did not (the run ended
	// before the old primary was lost); the window's arithmetic is pinned in
	// the default suite by chaos's TestPrimaryChangeWindowAndWhatCrossesIt.
	pgtest.Exhaustive(t)
	t.Parallel()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute,
		errors.New("a chaos run through the team's failover command did not finish within 3 minutes"))
	defer cancel()
	began := time.Now()
	tc := startTeamCluster(t, ctx)
	cfg := chaos.Config{Seed: pairSeed, Clients: 4, Intents: 400, Faults: chaos.Rates{}}.WithDefaults()
	h, err := ha.RunExternal(ctx, banks.OnServer(tc.srv, banks.Options{}), cfg, chaos.Options{},
		ha.ExternalOptions{WatchURL: tc.srv.AdminURL(), FailoverCmd: tc.cmd, CmdTimeout: time.Minute, WaitTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	res := chaos.Check(h)
	fc := h.FailoverCommand
	if fc == nil || fc.ExitCode != 0 || !strings.Contains(fc.Output, "promoted") || fc.AfterIntent != cfg.CrashIntent() {
		t.Fatalf("the failover command: %+v; want it run as intent %d started, exit 0, its output kept", fc, cfg.CrashIntent())
	}
	pc := tc.checkChange(t, cfg, res, chaos.CauseCommand)
	if !(fc.StartNs <= pc.LostNs && pc.SeenNs <= fc.EndNs+int64(time.Second)) {
		t.Errorf("the change's times (lost %d, seen %d) are not within the command's (%d–%d)", pc.LostNs, pc.SeenNs, fc.StartNs, fc.EndNs)
	}
	t.Logf("command: %s; pair + run %s", fc.Line(), time.Since(began).Round(time.Millisecond))
}

// A failover bank-sim did not cause, announced (--expect-failover: healing
// waits for the new primary) or not (nothing waits, and it is reported
// all the same, never silent).
func TestAFailoverSomeoneElseCausesIsReported(t *testing.T) {
	pgtest.Exhaustive(t)
	for _, expect := range []bool{true, false} {
		cause := chaos.CauseUnannounced
		if expect {
			cause = chaos.CauseExpected
		}
		t.Run(cause, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			tc := startTeamCluster(t, ctx)
			cfg := chaos.Config{Seed: pairSeed, Clients: 4, Intents: 400, Faults: chaos.Rates{}}.WithDefaults()
			failed := make(chan error, 1)
			var once sync.Once
			opts := chaos.Options{AtIntent: func(_ context.Context, i int) {
				if i == cfg.CrashIntent() {
					once.Do(func() { go func() { failed <- tc.failover() }() })
				}
			}}
			h, err := ha.RunExternal(ctx, banks.OnServer(tc.srv, banks.Options{}), cfg, opts,
				ha.ExternalOptions{WatchURL: tc.srv.AdminURL(), Expect: expect, WaitTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := <-failed; err != nil {
				t.Fatal(err)
			}
			if h.FailoverCommand != nil {
				t.Errorf("a failover command is recorded: %+v", h.FailoverCommand)
			}
			tc.checkChange(t, cfg, chaos.Check(h), cause)
		})
	}
}
