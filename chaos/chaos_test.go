package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m, chaos.CloseTestPools)) }

// run makes a fresh bank and runs cfg on it.
func run(t testing.TB, cfg chaos.Config) *chaos.History {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("the chaos run did not finish within 2 minutes"))
	defer cancel()
	h, err := chaos.RunOnLent(ctx, pgtest.Banks(t), cfg, chaos.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func logViolations(t *testing.T, h *chaos.History, res chaos.Result) {
	t.Helper()
	for i, v := range res.Violations {
		if i == 10 {
			t.Logf("… and %d more", len(res.Violations)-10)
			break
		}
		t.Logf("%s: %s", v.Kind, v.Detail)
	}
	if res.First != nil && res.First.Intent >= 0 {
		t.Logf("first violation's intent:\n%s", strings.Join(chaos.Timeline(h, res.First.Intent), "\n"))
	}
}

// A default run (1,000 intents, the default faults) with the correct handler
// breaks no rule and takes every defence path: VALID, not INCONCLUSIVE.
// Exhaustive: the default suite runs the same default run through the
// command line (chaos.txtar: seed 1, 1,000 intents, VALID, with audits, the
// cleanup job and the census before healing), and the audit's clean row a
// 400-intent run that must reach every path too.
func TestDefaultRunWithTheCorrectHandlerIsValid(t *testing.T) {
	pgtest.Exhaustive(t)
	t.Parallel()
	cfg := chaos.Config{Seed: 42}
	h := run(t, cfg)
	res := chaos.Check(h)
	t.Logf("%+v", res.Stats)
	if !res.Valid() {
		logViolations(t, h, res)
		t.Fatalf("seed %d: %d violations with the correct handler", cfg.Seed, len(res.Violations))
	}
	if v := res.Verdict(); v != chaos.Valid {
		t.Fatalf("seed %d: %s; not reached: %v", cfg.Seed, v, res.Coverage.Missing())
	}
	if res.Stats.Intents != 1000 || len(h.Audits) == 0 || h.Cleanup == nil || h.BeforeHeal == nil {
		t.Errorf("want 1000 intents, audits, a cleanup run and a census before healing; got %+v", res.Stats)
	}
	if len(h.Stalls) > 0 {
		t.Logf("staged races that did not happen: %v", h.Stalls)
	}
}

// The mistakes that the probe found outside every check (a claim on
// the request's context, locks on each app server's clock, replays that are
// not byte for byte the original) are each caught by a default run alone.
// Exhaustive: five runs of 1,000 intents; the default suite's audit test
// catches each of them too.
func TestDefaultRunCatchesTheMistakesChecksUsedToMiss(t *testing.T) {
	pgtest.Exhaustive(t)
	t.Parallel()
	want := map[string]string{
		"claim-on-request-context": chaos.KindAbandoned,
		"app-clock":                chaos.KindKeyLost,
		"jsonb-replay":             chaos.KindReplay,
		"no-fingerprint":           chaos.KindWrong,
		"unscoped-keys":            chaos.KindWrong,
	}
	for name, kind := range want {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bug, err := mistakes.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			h := run(t, chaos.Config{Seed: 42, Bug: &bug})
			res := chaos.Check(h)
			if res.ByKind[kind] == 0 {
				t.Fatalf("--bug %s: no %s violation; verdict %s, %v", name, kind, res.Verdict(), kinds(res))
			}
			t.Logf("%d violations, first: %s %s", len(res.Violations), res.First.Kind, res.First.Detail)
		})
	}
}

// Same seed, same schedule: the intents and the fault of every attempt are
// a function of the seed alone, and a real run follows the plan whatever the
// goroutines' order.
func TestSameSeedSameSchedule(t *testing.T) {
	t.Parallel()
	cfg := chaos.Config{Seed: 7, Clients: 8, Intents: 50}
	a, b := cfg.Plan(50), cfg.Plan(50)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	other := cfg
	other.Seed = 8
	if reflect.DeepEqual(a, other.Plan(50)) {
		t.Fatal("seeds 7 and 8 plan the same run")
	}
	fired := 0
	for _, f := range a.Faults {
		for _, k := range f {
			if k != "" {
				fired++
			}
		}
	}
	if fired == 0 {
		t.Fatal("the plan injects no faults")
	}

	for range 2 {
		h := run(t, cfg)
		for i, in := range h.Intents {
			p := a.Intents[i]
			if in.Index != i || in.Label != p.Label || in.Key != p.Key || in.Request != p.Request || in.UserID != p.UserID {
				t.Fatalf("intent %d: ran %+v, planned %+v", i, in, p)
			}
		}
		assertFollowsPlan(t, cfg, a, h)
	}
}

// assertFollowsPlan fails t unless every fault-phase attempt in h met the
// fault and the server copy that the seed planned for it.
func assertFollowsPlan(t *testing.T, cfg chaos.Config, plan chaos.Schedule, h *chaos.History) {
	t.Helper()
	for i, in := range h.Intents {
		for _, at := range in.Attempts {
			if at.Phase != chaos.PhaseFault {
				continue
			}
			if want := plan.Faults[i][at.N-1]; at.Fault != want {
				t.Fatalf("intent %d attempt %d met %q, planned %q", i, at.N, at.Fault, want)
			}
			if want := cfg.Instance(i, at.N); at.Instance != want {
				t.Fatalf("intent %d attempt %d went to server %d, planned %d", i, at.N, at.Instance, want)
			}
		}
	}
}

// BenchmarkChaosRun measures a whole 10,000-intent, 16-client run on the
// real database, faults, healing and audits included (go test -bench
// ChaosRun -benchtime 1x).
func BenchmarkChaosRun(b *testing.B) {
	for b.Loop() {
		h := run(b, chaos.Config{Seed: 99, Clients: 16, Intents: 10_000})
		res := chaos.Check(h)
		if !res.Valid() {
			b.Fatalf("%d violations", len(res.Violations))
		}
		b.ReportMetric(res.Stats.IntentsPerSecond, "intents/s")
		b.ReportMetric(float64(res.Stats.Attempts), "attempts")
	}
}

// Over real HTTP, through the fault proxies and the retrying client, a
// default run with the correct handler is VALID too, and follows the plan.
//
// The audit's rates and length (400 intents, chaos.AuditRates) take every
// defence path in a fraction of a default run's 1,000 intents; the default
// run's own rates are pinned in process by chaos.txtar.
func TestHTTPRunWithTheCorrectHandlerIsValid(t *testing.T) {
	t.Parallel()
	cfg := chaos.Config{Seed: 42, HTTP: true, Intents: chaos.AuditIntents, Clients: 8, Faults: chaos.AuditRates()}
	h := run(t, cfg)
	res := chaos.Check(h)
	t.Logf("%+v", res.Stats)
	if !res.Valid() {
		logViolations(t, h, res)
		t.Fatalf("seed %d: %d violations with the correct handler over HTTP", cfg.Seed, len(res.Violations))
	}
	if v := res.Verdict(); v != chaos.Valid {
		t.Fatalf("seed %d over HTTP: %s; not reached: %v", cfg.Seed, v, res.Coverage.Missing())
	}
	assertFollowsPlan(t, cfg, cfg.Plan(chaos.AuditIntents), h)
}

// The checker catches the lesson's mistakes over HTTP too.
func TestHTTPRunCatchesBugs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"new-key-per-attempt", "memory-keys"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bug, err := mistakes.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			// 50 intents: seed 42 breaks 14 rules with new-key-per-attempt
			// and 67 with memory-keys already.
			cfg := chaos.Config{Seed: 42, Clients: 8, Intents: 50, HTTP: true, Bug: &bug}
			h := run(t, cfg)
			res := chaos.Check(h)
			if res.Valid() {
				t.Fatalf("seed %d: --bug %s over HTTP went unnoticed: %+v", cfg.Seed, name, res.Stats)
			}
			t.Logf("%d violations, first: %s %s", len(res.Violations), res.First.Kind, res.First.Detail)
		})
	}
}

// PostgreSQL killed with SIGKILL in the middle of a run and restarted on the
// same data: every acknowledged transfer and its key survive, and healing
// settles every intent the outage left unknown. The run has a server of its
// own, since the crash would break every other test's connections.
func TestKillPostgresRunIsValid(t *testing.T) {
	t.Parallel()
	if os.Getenv("DATABASE_URL") != "" {
		t.Skip("DATABASE_URL is set: --kill-postgres needs the PostgreSQL bank-sim starts itself")
	}
	// A bound against a hang: at load 20-36 two minutes ran out.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	srv, err := postgres.Start(ctx, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	// 30 intents: the crash lands among intents 7-21 (CrashIntent; intent
	// 16 for seed 5), with transfers completed on both sides of it. The
	// exhaustive run takes 60, as before.
	intents := 30
	if pgtest.IsExhaustive() {
		intents = 60
	}
	for _, http := range []bool{false, true} {
		cfg := chaos.Config{Seed: 5, Clients: 8, Intents: intents, KillPostgres: true, HTTP: http}
		h, err := chaos.RunOnWith(ctx, banks.OnServer(srv, banks.Options{}), cfg, chaos.Options{CrashPostgres: srv.Crash})
		if err != nil {
			t.Fatalf("http %v: %v", http, err)
		}
		res := chaos.Check(h)
		t.Logf("http %v: crashes %+v; %+v", http, h.Crashes, res.Stats)
		if !res.Valid() {
			logViolations(t, h, res)
			t.Fatalf("http %v, seed %d: %d violations across a crash", http, cfg.Seed, len(res.Violations))
		}
		if len(h.Crashes) != 1 || h.Crashes[0].Error != "" || h.Crashes[0].AfterIntent != cfg.CrashIntent() {
			t.Fatalf("http %v: want one crash as intent %d started, got %+v", http, cfg.CrashIntent(), h.Crashes)
		}
		if len(h.CompletedKeys) == 0 || res.Stats.OK == 0 {
			t.Fatalf("http %v: nothing completed: %+v", http, res.Stats)
		}
		// The keys are checked across the crash only if some were
		// answered 201 before it, and the restarted server took more.
		var before, after int
		for _, in := range h.Intents {
			for _, at := range in.Attempts {
				if at.Status == 201 && at.EndNs < h.Crashes[0].AtNs {
					before++
				} else if at.Status == 201 && at.StartNs > h.Crashes[0].AtNs {
					after++
				}
			}
		}
		if before == 0 || after == 0 {
			t.Fatalf("http %v: %d transfers answered 201 before the crash, %d after; want some on both sides", http, before, after)
		}
		t.Logf("http %v: %d answered 201 before the crash, %d after", http, before, after)
		var keyCheck bool
		for _, c := range res.Checks {
			keyCheck = keyCheck || c.Kind == chaos.KindKeyLost
		}
		if !keyCheck {
			t.Fatal("the keys were not checked across the crash")
		}
		if res.ByKind[chaos.KindKeyLost] != 0 {
			t.Fatal("keys lost across the crash")
		}
		// The side effects' dispatchers and consumer lost PostgreSQL with
		// the crash: the history counts their errors, and the run's own
		// outage explains each (they make no run INCONCLUSIVE).
		w := h.WorkerErrors
		if w == nil {
			t.Fatalf("http %v: the side effects' workers hit no error across the crash; want their failed claims and polls", http)
		}
		t.Logf("http %v: %s; first %+v", http, w.Line(), w.First)
		if w.Unexplained() != 0 || len(res.Coverage.Unexplained) != 0 {
			t.Fatalf("http %v: %d of the workers' %d errors are not put down to the crash: %q", http, w.Unexplained(), w.Count, res.Coverage.Unexplained)
		}
	}
}

// Without a way to crash PostgreSQL, a run that must kill it does not start.
func TestKillPostgresNeedsACrash(t *testing.T) {
	t.Parallel()
	if _, err := chaos.RunWith(context.Background(), nil, chaos.Config{KillPostgres: true}, chaos.Options{}); !errors.Is(err, chaos.ErrNoCrash) {
		t.Fatalf("got %v, want ErrNoCrash", err)
	}
}

// Issue 30, kind 1: a defence path is counted on the event that proves it.
// A server stopped after its claim counts as late-server-woken only when it
// carried on past its claim, not when the call that wakes it returned: a run
// whose stopped servers were killed instead takes the path zero times. Free
// and deterministic, 20 intents, servers stopped often.
func TestLateServerCountedOnlyWhenItCarriedOn(t *testing.T) {
	t.Parallel()
	for _, det := range []bool{false, true} {
		t.Run(fmt.Sprintf("deterministic %v", det), func(t *testing.T) {
			t.Parallel()
			cfg := chaos.Config{Seed: 3, Clients: 2, Intents: 20, Deterministic: det, Faults: chaos.Rates{chaos.FaultCrashAfterClaim: 0.4}}
			h := run(t, cfg)
			stopped, woken := h.Fired[chaos.FaultCrashAfterClaim], h.Server[chaos.PathWoken]
			if stopped == 0 {
				t.Fatalf("seed %d: no server was stopped after its claim; pick another seed", cfg.Seed)
			}
			if woken == 0 || woken > stopped {
				t.Errorf("seed %d: %d servers stopped after their claim, %d counted as woken: want between 1 and %d", cfg.Seed, stopped, woken, stopped)
			}
		})
	}
}

// A short run (200 intents, the default rates) with the correct handler
// breaks no rule, fires every attempt fault, and takes every defence those
// faults are there for, whatever the seed: the schedule gives each its
// chance (TestShortRunScheduleGivesEveryFaultItsChance), and this is the
// run that proves the chance is taken. Seed 7; exhaustive: 1-20. (The
// side effects' own faults fire per outbox row as the dispatchers race,
// outside the schedule: not asserted here.)
//
// One seed by default: whether the schedule places every fault where its
// defence can follow is TestShortRunScheduleGivesEveryFaultItsChance's to
// prove, over seeds 1-40, without a run; this run proves that a fault drawn
// or placed is taken. Seed 7 had its deadlock and its held intent placed
// by the guarantee (seed 1, which had its expire-mid-write placed, is the
// exhaustive run's).
func TestShortRunTakesEveryScheduledDefence(t *testing.T) {
	t.Parallel()
	seeds := []uint64{7} // 7 never drew a deadlock on a transfer that could take it
	if pgtest.IsExhaustive() {
		seeds = nil
		for s := range uint64(20) {
			seeds = append(seeds, s+1)
		}
	}
	defences := []string{chaos.PathReplay, chaos.PathConflict, chaos.PathTakeover, chaos.PathExpiredMidWrite,
		chaos.PathFencing, chaos.PathWoken, chaos.PathTxRetry, chaos.PathFreezeWaited, chaos.PathHealed,
		chaos.PathLockTakenAfterExpiry, chaos.PathLockReleaseRefused}
	for _, seed := range seeds {
		cfg := chaos.Config{Seed: seed, Intents: 200}
		h := run(t, cfg)
		res := chaos.Check(h)
		if !res.Valid() {
			logViolations(t, h, res)
			t.Fatalf("seed %d: %d violations with the correct handler", seed, len(res.Violations))
		}
		for _, p := range res.Coverage.Paths {
			if p.Count == 0 && slices.Contains(defences, p.Path) {
				t.Errorf("chaos --seed %d --intents 200: %s never happened", seed, p.Path)
			}
		}
		for _, f := range res.Coverage.Faults {
			if f.Rate > 0 && f.Fired == 0 && !slices.Contains(outbox.PipelineFaults(), f.Kind) {
				t.Errorf("chaos --seed %d --intents 200: fault %s never fired", seed, f.Kind)
			}
		}
	}
}
