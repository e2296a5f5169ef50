package chaos_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// run makes a fresh bank and runs cfg on it.
func run(t testing.TB, cfg chaos.Config) *chaos.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := scenarios.ServerBanks(pgtest.Server(t)).NewBank(ctx, "chaos")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pool, err := chaos.Pool(ctx, db.Pool, cfg.Clients)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	h, err := chaos.Run(ctx, pool, cfg, nil)
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

func TestShortRunWithTheCorrectHandlerIsValid(t *testing.T) {
	t.Parallel()
	cfg := chaos.Config{Seed: 42, Clients: 8, Intents: 300}
	h := run(t, cfg)
	res := chaos.Check(h)
	s := res.Stats
	t.Logf("%+v", s)
	if !res.Valid() {
		logViolations(t, h, res)
		t.Fatalf("seed %d: %d violations with the correct handler", cfg.Seed, len(res.Violations))
	}
	if s.Intents != 300 || s.OK == 0 || s.Rejected == 0 {
		t.Errorf("want 300 intents, some ok and some rejected; got %+v", s)
	}
	if s.Healed == 0 || s.Replays == 0 || len(h.Audits) == 0 {
		t.Errorf("want healed intents, replays and audits; got %+v", s)
	}
}

// Same seed, same schedule: the intents and the fault of every attempt are
// a function of the seed alone, and a real run follows the plan whatever the
// goroutines' order.
func TestSameSeedSameSchedule(t *testing.T) {
	t.Parallel()
	cfg := chaos.Config{Seed: 7, Clients: 8, Intents: 100}
	a, b := cfg.Plan(100), cfg.Plan(100)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one seed differ")
	}
	other := cfg
	other.Seed = 8
	if reflect.DeepEqual(a, other.Plan(100)) {
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

// Over real HTTP, through the fault proxies and the retrying client, the
// same schedule gives a valid history with the correct handler.
func TestHTTPRunWithTheCorrectHandlerIsValid(t *testing.T) {
	t.Parallel()
	cfg := chaos.Config{Seed: 42, Clients: 8, Intents: 200, HTTP: true}
	h := run(t, cfg)
	res := chaos.Check(h)
	s := res.Stats
	t.Logf("%+v", s)
	if !res.Valid() {
		logViolations(t, h, res)
		t.Fatalf("seed %d: %d violations with the correct handler over HTTP", cfg.Seed, len(res.Violations))
	}
	if s.Intents != 200 || s.OK == 0 || s.Rejected == 0 || s.Healed == 0 || s.Replays == 0 {
		t.Errorf("want ok, rejected, healed intents and replays; got %+v", s)
	}
	assertFollowsPlan(t, cfg, cfg.Plan(200), h)
}

// The checker catches the lesson's mistakes over HTTP too.
func TestHTTPRunCatchesBugs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"new-key-per-attempt", "memory-keys"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bug, err := idem.LookupBug(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg := chaos.Config{Seed: 42, Clients: 8, Intents: 200, HTTP: true, Bug: &bug}
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := postgres.Start(ctx, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, http := range []bool{false, true} {
		cfg := chaos.Config{Seed: 5, Clients: 8, Intents: 300, KillPostgres: true, HTTP: http}
		h, err := chaos.RunOnWith(ctx, scenarios.ServerBanks(srv), cfg, chaos.Options{CrashPostgres: srv.Crash})
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
		var keyCheck bool
		for _, c := range res.Checks {
			keyCheck = keyCheck || c.Kind == chaos.KindKeyLost
		}
		if !keyCheck {
			t.Fatal("the keys were not checked across the crash")
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
