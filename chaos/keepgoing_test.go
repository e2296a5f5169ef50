package chaos_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// A workload told to keep going (a failover drill whose failover has not
// yet been answered) outlives its plan: clients send ordinary transfers
// past its intents until a transfer sent after the plan ended has been
// acknowledged, and the history holds them after the planned ones, all
// settled and checked.
func TestKeepGoingOutlivesThePlanUntilAnAcknowledgement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("the chaos run did not finish within 2 minutes"))
	defer cancel()
	cfg := chaos.Config{Seed: 7, Clients: 4, Intents: 40, Faults: chaos.Rates{}}
	var (
		start   time.Time
		once    sync.Once
		planEnd int64 // when the plan was done, an offset of the run
		calls   int
		mu      sync.Mutex
	)
	opts := chaos.Options{
		Began: func(t time.Time) { start = t },
		KeepGoing: func(lastAckStartNs int64) bool {
			once.Do(func() { planEnd = time.Since(start).Nanoseconds() })
			mu.Lock()
			calls++
			mu.Unlock()
			return lastAckStartNs < planEnd
		},
	}
	h, err := chaos.RunOnLent(ctx, pgtest.Banks(t), cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Intents) <= cfg.Intents {
		t.Fatalf("%d intents, %d planned: the workload did not go on past its plan (KeepGoing asked %d times)", len(h.Intents), cfg.Intents, calls)
	}
	acked := false
	for i, in := range h.Intents {
		if in.Index != i {
			t.Fatalf("intent %d of the history is intent %d: the ones past the plan are not in order after it", i, in.Index)
		}
		for _, a := range in.Attempts {
			acked = acked || a.Seen == chaos.SeenOK && !a.Replayed && a.StartNs >= planEnd
		}
	}
	if !acked {
		t.Errorf("no transfer sent after the plan ended (%s) was acknowledged, yet the run stopped", time.Duration(planEnd))
	}
	if pp := h.PastPlan; pp == nil || pp.Intents != len(h.Intents)-cfg.Intents || pp.EndNs <= 0 || pp.LastNs < pp.EndNs {
		t.Errorf("the history's PastPlan %+v; want the %d intents past the plan, after it", pp, len(h.Intents)-cfg.Intents)
	} else {
		t.Log(pp.Line())
	}
	res := chaos.Check(h)
	if !res.Valid() || res.Stats.Intents != len(h.Intents) {
		t.Errorf("%d violations, %d intents checked of %d", len(res.Violations), res.Stats.Intents, len(h.Intents))
	}
	t.Logf("%d intents, %d planned", len(h.Intents), cfg.Intents)
}
