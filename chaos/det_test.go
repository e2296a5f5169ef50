package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// detRun runs cfg deterministically on a fresh bank and returns the history
// and every choice its scheduler made.
func detRun(t testing.TB, cfg chaos.Config) (*chaos.History, []chaos.Decision) {
	t.Helper()
	cfg.Deterministic = true
	ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Minute, errors.New("the deterministic run did not finish within 5 minutes"))
	defer cancel()
	var ds []chaos.Decision
	h, err := chaos.RunOnLent(ctx, pgtest.Banks(t), cfg, chaos.Options{Decisions: func(d chaos.Decision) { ds = append(ds, d) }})
	if err != nil {
		t.Fatalf("seed %d, %d clients: %v", cfg.Seed, cfg.Clients, err)
	}
	return h, ds
}

// The same seed and config run twice give the same history, byte for byte
// (the same SHA-256). A difference names the first event where the two runs
// parted, and the first choice where their schedulers did. By default: two
// seeds, at four clients and at sixteen (where tasks wait for each other's
// locks most), 20 intents (a scheduler that draws from math/rand's global
// source instead of the seed's parts the runs at its 12th choice);
// exhaustive: three seeds at one client, four and sixteen, 120 intents.
func TestDeterministicRunsRepeat(t *testing.T) {
	t.Parallel()
	type run struct {
		seed    uint64
		clients int
	}
	runs, intents := []run{{1, 4}, {2, 16}}, 20
	if pgtest.IsExhaustive() {
		runs, intents = nil, 120
		for _, seed := range []uint64{1, 2, 3} {
			for _, clients := range []int{1, 4, 16} {
				runs = append(runs, run{seed, clients})
			}
		}
	}
	for _, r := range runs {
		seed, clients := r.seed, r.clients
		t.Run(fmt.Sprintf("seed %d clients %d", seed, clients), func(t *testing.T) {
			t.Parallel()
			cfg := chaos.Config{Seed: seed, Clients: clients, Intents: intents, Faults: chaos.AuditRates()}
			a, da := detRun(t, cfg)
			b, db := detRun(t, cfg)
			ha, _ := a.Hash()
			hb, _ := b.Hash()
			if ha != hb {
				t.Errorf("seed %d, %d clients: the histories differ (%s, %s)\n%s", seed, clients, ha[:12], hb[:12], chaos.FirstDifference(a, b))
				if d := chaos.FirstDifferentDecision(da, db); d != "" {
					t.Errorf("the schedulers parted at %s", d)
				}
				return
			}
			if a.Deterministic == nil || a.Deterministic.Steps != len(da) || a.Deterministic.Schedule != b.Deterministic.Schedule {
				t.Fatalf("the history does not say what the scheduler did: %+v, %d choices", a.Deterministic, len(da))
			}
			res := chaos.Check(a)
			if !res.Valid() {
				t.Fatalf("seed %d, %d clients: %d violations with the correct handler, first %s: %s", seed, clients, len(res.Violations), res.First.Kind, res.First.Detail)
			}
			pipelineRanBeside(t, a, da)
			t.Logf("%d steps, %s, hash %s, %d transfers", len(da), res.Verdict(), ha[:12], len(a.Final.Transfers))
		})
	}
}

// pipelineRanBeside checks that the side effects' pipeline ran as tasks of
// the scheduler among the clients, with its faults: a dispatcher and the
// consumer were chosen before the last client ended, and the pipeline's
// faults that fired are those the history lists, one decision each.
func pipelineRanBeside(t *testing.T, h *chaos.History, ds []chaos.Decision) {
	t.Helper()
	lastClient := 0
	for _, d := range ds {
		if strings.HasPrefix(d.Ran, "client-") {
			lastClient = d.Step
		}
	}
	chosen := map[string]int{}
	for _, d := range ds {
		if d.Step < lastClient {
			chosen[strings.TrimRight(d.Ran, "0123456789")]++
		}
	}
	if chosen["dispatcher-"] == 0 || chosen["consumer"] == 0 {
		t.Fatalf("the pipeline did not run beside the clients: before the last client's step %d the scheduler chose %v", lastClient, chosen)
	}
	fired := 0
	for _, k := range outbox.PipelineFaults() {
		fired += h.Fired[k]
	}
	if fired == 0 || fired != len(h.PipelineFaults) {
		t.Fatalf("%d side-effect faults fired (%v), %d decisions listed", fired, h.Fired, len(h.PipelineFaults))
	}
}

// Another seed is another run, and so is another number of clients: the
// hash tells runs apart.
func TestDeterministicRunsDiffer(t *testing.T) {
	t.Parallel()
	// Ten intents: two seeds plan other intents from the first, and
	// another number of clients another schedule from the first steps.
	cfg := chaos.Config{Seed: 1, Clients: 4, Intents: 10}
	a, _ := detRun(t, cfg)
	cfg.Seed = 2
	b, _ := detRun(t, cfg)
	cfg.Seed, cfg.Clients = 1, 3
	c, _ := detRun(t, cfg)
	ha, _ := a.Hash()
	hb, _ := b.Hash()
	hc, _ := c.Hash()
	if ha == hb || ha == hc {
		t.Fatalf("different runs, one hash: %s %s %s", ha, hb, hc)
	}
	if chaos.FirstDifference(a, b) == "" || chaos.FirstDifference(a, a) != "" {
		t.Fatal("FirstDifference does not tell runs apart")
	}
}
