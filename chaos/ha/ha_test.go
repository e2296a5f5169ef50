package ha_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// haDuration is the length of a run without a stall; the leader dies in
// its middle half, and the clients go on through the outage and after.
const haDuration = 15 * time.Second

// stallIntents is the size of a run with a stall: a count, not a
// duration, so that clients are still sending when replication stalls,
// however loaded the machine (the leader dies at an intent in the middle
// half, and at least a quarter are left).
const stallIntents = 500

// outcome is one run through a failover, with the cluster's figures.
type outcome struct {
	*ha.Report
	startup  time.Duration
	failover hacluster.Failover
	pss, rss int64
	procs    int
	// leader is the primary when the run began; events the monitor's
	// state changes after it (read when sync, before the cluster stops).
	leader    string
	events    []hacluster.Event
	eventsErr error
}

func (o outcome) String() string {
	return fmt.Sprintf("%s; cluster up in %s, failover: monitor %s, first write %s; memory %d processes, PSS %d MiB (RSS %d MiB)",
		o.Report, o.startup.Round(100*time.Millisecond), o.failover.Monitor.Round(100*time.Millisecond), o.failover.Write.Round(100*time.Millisecond),
		o.procs, o.pss>>20, o.rss>>20)
}

// through starts a formation (synchronous standby or not), runs cfg
// through its multi-host URL and kills the leader at the moment the seed
// picks, first stalling replication when stall; the cluster is gone when
// it returns, whatever happened.
func through(t *testing.T, sync, stall bool, cfg chaos.Config) outcome {
	t.Helper()
	if err := hacluster.Available(); err != nil {
		t.Skip(err.Error())
	}
	ctx, cancel := context.WithTimeoutCause(context.Background(), 15*time.Minute,
		errors.New("a run through a failover did not finish within 15 minutes"))
	defer cancel()
	c, err := hacluster.Start(ctx, hacluster.Options{Sync: sync})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	}()
	srv, err := postgres.Start(ctx, postgres.Options{URL: c.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Its owner lock's session died with the old primary: dropping
		// its databases may fail, and the cluster goes anyway.
		if err := srv.Close(); err != nil {
			t.Logf("closing the bank's server after the failover: %v", err)
		}
	}()
	o := outcome{startup: c.Startup}
	first, err := c.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o.leader = first.Name
	leader := ha.Local(c, stall, 2*time.Minute, func(f hacluster.Failover) { o.failover = f })
	// The memory of every process, under load, just before the kill (after
	// the stall, so as not to delay it while the clients are sending).
	kill := leader.Kill
	leader.Kill = func(ctx context.Context) (time.Time, error) {
		o.pss, o.rss, o.procs = c.Memory()
		return kill(ctx)
	}
	r, err := ha.Run(ctx, srv, cfg, leader)
	if err != nil {
		t.Fatal(err)
	}
	o.Report = r
	if sync {
		o.events, o.eventsErr = c.Events(ctx)
	}
	inProgressNamed(t, r)
	if r.Acknowledged == 0 || r.LastOKNs < 0 || r.FirstOKNs < 0 {
		t.Fatalf("no transfer acknowledged on one side of the kill: %s", o)
	}
	return o
}

func mode(sync bool) string {
	if sync {
		return "sync"
	}
	return "async"
}

// syncLoss fails t for acknowledged transfers or keys lost across the
// failover of a synchronous standby, unless the monitor had made the
// leader wait_primary first: finding the standby unhealthy (a busy
// machine, the tests' quick health checks: 2 s, one retry), it lets the
// primary commit without it, pg_auto_failover's choice, and a failover
// after that loses what an asynchronous standby loses (CI stop 36:
// TestPgAutoFailoverFailoverCmd/sync lost 1217 transfers that way).
func syncLoss(t *testing.T, lost, keys int, leader string, evs []hacluster.Event, evErr error) {
	t.Helper()
	if lost == 0 && keys == 0 {
		return
	}
	if evErr != nil {
		t.Fatalf("synchronous standby: %d acknowledged transfers and %d keys lost; reading the monitor's events: %v", lost, keys, evErr)
	}
	if i := slices.IndexFunc(evs, func(e hacluster.Event) bool { return e.Node == leader && e.Goal == "wait_primary" }); i >= 0 {
		t.Logf("the monitor dropped the synchronous standby before the failover (%s: %s→%s, %q): %d acknowledged transfers and %d keys lost, as an asynchronous standby loses them",
			evs[i].Node, evs[i].Reported, evs[i].Goal, evs[i].Description, lost, keys)
		return
	}
	t.Errorf("synchronous standby: %d acknowledged transfers and %d keys lost across the failover, want none (the primary %s stayed synchronous: the monitor's events %+v)", lost, keys, leader, evs)
}

// logViolations logs the first few violations of a run.
func logViolations(t *testing.T, r *ha.Report) {
	t.Helper()
	for i, v := range r.Result.Violations {
		if i == 8 {
			t.Logf("… and %d more", len(r.Result.Violations)-i)
			break
		}
		t.Logf("  %s: %s", v.Kind, v.Detail)
	}
}

// inProgressNamed checks, on a run of the correct handler and client
// through a failover (which can leave a key's claim replicated and its
// completion not), that every key still in progress at the end is one an
// intent sent and either had a final answer with or never settled, and
// that the key-lost or unresolved violation of that intent names it: the
// claim on which the rule key-in-progress was folded into those two.
func inProgressNamed(t *testing.T, r *ha.Report) {
	t.Helper()
	h := r.History
	for _, k := range h.StuckKeys {
		named := false
		for _, in := range h.Intents {
			answered, sent := false, false
			for _, a := range in.Attempts {
				if fmt.Sprintf("%d/%s", in.UserID, a.Key) == k {
					sent = true
					answered = answered || a.Seen != chaos.SeenUnknown
				}
			}
			if !sent || !answered && in.Outcome != chaos.SeenUnknown {
				continue
			}
			want := chaos.KindKeyLost
			if !answered {
				want = chaos.KindUnresolved
			}
			for _, v := range r.Result.Violations {
				named = named || v.Kind == want && v.Intent == in.Index && strings.Contains(v.Detail, k)
			}
		}
		if !named {
			t.Errorf("key %s is still in progress at the end, but no key-lost or unresolved violation of an intent that sent it, and had its final answer with it or never settled, names it", k)
		}
	}
	t.Logf("%d keys still in progress at the end", len(h.StuckKeys))
}

// Replication to the standby stalls (its walsender frozen, as behind a
// congested link) until the primary has made a few commits the standby
// does not have; then the leader dies. Asynchronous, the primary had
// acknowledged those transfers, and the promoted standby never saw them:
// acknowledged transfers are lost. Synchronous, the same commits were
// waiting for the standby, no client was told anything, and nothing
// acknowledged is lost.
func TestStalledStandbyLosesAcknowledgedTransfersOnlyWhenAsync(t *testing.T) {
	pgtest.Exhaustive(t)
	for _, sync := range []bool{false, true} {
		t.Run(mode(sync), func(t *testing.T) {
			o := through(t, sync, true, chaos.Config{Seed: 20261202, Clients: 8, Intents: stallIntents})
			t.Logf("%s, stalled: %s", mode(sync), o)
			logViolations(t, o.Report)
			if sync {
				syncLoss(t, o.AckLost, o.KeysLost, o.leader, o.events, o.eventsErr)
				return
			}
			if o.AckLost == 0 {
				t.Fatalf("asynchronous standby, stalled for %d commits before the kill: no acknowledged transfer lost", ha.StallCommits)
			}
		})
	}
}

// Runs that kill the leader with replication as it happens to be (no
// stall): a synchronous standby loses nothing acknowledged; what an
// asynchronous one loses depends on the lag at the moment of the kill, so
// it is reported, not asserted. BANK_SIM_HA_RUNS sets how many runs of
// each (1 by default).
func TestFailoverThroughChaos(t *testing.T) {
	pgtest.Exhaustive(t)
	runs := 1
	if s := os.Getenv("BANK_SIM_HA_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BANK_SIM_HA_RUNS=%q: want a number of runs, 1 or more", s)
		}
		runs = n
	}
	var summary []string
	for _, sync := range []bool{false, true} {
		for i := range runs {
			seed := uint64(20261202 + i)
			t.Run(fmt.Sprintf("%s-%d", mode(sync), seed), func(t *testing.T) {
				o := through(t, sync, false, chaos.Config{Seed: seed, Clients: 8, Duration: haDuration})
				line := fmt.Sprintf("%s seed %d: %s", mode(sync), seed, o)
				summary = append(summary, line)
				t.Log(line)
				logViolations(t, o.Report)
				if sync {
					syncLoss(t, o.AckLost, o.KeysLost, o.leader, o.events, o.eventsErr)
				}
			})
		}
	}
	t.Logf("all runs:\n%s", strings.Join(summary, "\n"))
}

// The team's failover command on pg_auto_failover, as Patroni's cells run
// patronictl: chaos through the formation's multi-host URL with
// --failover-cmd asking the monitor for a failover (what `pg_autoctl
// perform failover` asks), replication-quorum off and on. Synchronous,
// nothing acknowledged may be lost; asynchronous, what is lost is logged.
func TestPgAutoFailoverFailoverCmd(t *testing.T) {
	pgtest.Exhaustive(t)
	for _, sync := range []bool{false, true} {
		t.Run(mode(sync), func(t *testing.T) {
			if err := hacluster.Available(); err != nil {
				t.Skip(err.Error())
			}
			ctx, cancel := context.WithTimeoutCause(context.Background(), 15*time.Minute,
				errors.New("a run through a pg_auto_failover failover command did not finish within 15 minutes"))
			defer cancel()
			c, err := hacluster.Start(ctx, hacluster.Options{Sync: sync})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := c.Stop(); err != nil {
					t.Error(err)
				}
			}()
			srv, err := postgres.Start(ctx, postgres.Options{URL: c.URL()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := srv.Close(); err != nil {
					t.Logf("closing the bank's server after the failover: %v", err)
				}
			}()
			leader, err := c.Primary(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cfg := chaos.Config{Seed: pairSeed, Clients: 8, Intents: patroniIntents, Faults: chaos.Rates{}}.WithDefaults()
			var pss, rss int64
			var procs int
			opts := chaos.Options{AtIntent: func(_ context.Context, i int) {
				if i == cfg.CrashIntent() {
					pss, rss, procs = c.Memory()
				}
			}}
			h, err := ha.RunExternal(ctx, banks.OnServer(srv, banks.Options{}), cfg, opts, ha.ExternalOptions{
				WatchURL: srv.AdminURL(), FailoverCmd: c.FailoverCommand(), CmdTimeout: 2 * time.Minute, WaitTimeout: 3 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			res := chaos.Check(h)
			pc := checkOneChange(t, cfg, h, res, leader.Port, true, "failover requested")
			lost, keys := res.ByKind[chaos.KindAckMissing], res.ByKind[chaos.KindKeyLost]
			t.Logf("pg_auto_failover failover-cmd %s: acknowledged transfers lost %d, keys lost %d; %s; no primary for %s (watcher); command took %s; cluster up in %s; memory %d processes, PSS %d MiB (RSS %d MiB); %d violations",
				mode(sync), lost, keys, pc.Line(), time.Duration(pc.SeenNs-pc.LastSeenNs).Round(time.Millisecond),
				time.Duration(h.FailoverCommand.EndNs-h.FailoverCommand.StartNs).Round(time.Millisecond), c.Startup.Round(100*time.Millisecond),
				procs, pss>>20, rss>>20, len(res.Violations))
			if sync {
				evs, err := c.Events(ctx)
				syncLoss(t, lost, keys, leader.Name, evs, err)
			}
		})
	}
}
