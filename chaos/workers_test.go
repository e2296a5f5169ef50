package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// A run of the correct handler whose dispatchers could not claim for a
// while: the outbox's attempts table is renamed away as intent 40 starts
// and back as intent 120 does, so that every claim between fails in real
// PostgreSQL (42P01) and nothing else does; the rows wait, and healing
// drains them, so no rule is broken. The history keeps the errors, and the
// run is INCONCLUSIVE, not VALID: the one-line mistake it catches is a run
// that drops the pipeline's errors (no WorkerErrors in the history, or
// Cover not listing them), which called this run VALID.
func TestSideEffectWorkersErrorsMakeTheRunInconclusive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("the chaos run did not finish within 2 minutes"))
	defer cancel()
	cfg := chaos.Config{Seed: 42, Clients: 8, Intents: 200}.WithDefaults()
	db, err := pgtest.Banks(t).NewBank(ctx, "workers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	pool, err := chaos.PoolFor(ctx, db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	var mu sync.Mutex
	away := false
	swap := func(ctx context.Context, gone bool) error {
		mu.Lock()
		defer mu.Unlock()
		if away == gone {
			return nil
		}
		sql := "ALTER TABLE outbox_attempts RENAME TO outbox_attempts_away"
		if !gone {
			sql = "ALTER TABLE outbox_attempts_away RENAME TO outbox_attempts"
		}
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			return err
		}
		away = gone
		return nil
	}
	t.Cleanup(func() { _ = swap(context.Background(), false) }) // the bank is lent again
	var swapErr error
	opts := chaos.Options{
		AtIntent: func(ctx context.Context, i int) {
			var err error
			switch i {
			case 40:
				err = swap(ctx, true)
			case 120:
				err = swap(ctx, false)
			}
			if err != nil {
				mu.Lock()
				swapErr = err
				mu.Unlock()
			}
		},
		BeforeHeal: func(ctx context.Context) error { return swap(ctx, false) },
	}
	h, err := chaos.RunWith(ctx, pool, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if swapErr != nil {
		t.Fatalf("renaming the outbox's attempts table: %v", swapErr)
	}
	res := chaos.Check(h)
	if !res.Valid() {
		logViolations(t, h, res)
		t.Fatalf("%d violations: the correct handler broke a rule while the dispatchers could not claim", len(res.Violations))
	}
	w := h.WorkerErrors
	if w == nil || w.Unexplained() == 0 {
		t.Fatalf("the history's WorkerErrors are %+v; want the dispatchers' failed claims, none explained (no outage)", w)
	}
	t.Logf("%s; first %+v", w.Line(), w.First)
	if !strings.Contains(w.First[0].Message, "outbox_attempts") || !strings.Contains(w.First[0].Message, "42P01") {
		t.Errorf("the first error %q is not the claim's missing table (42P01)", w.First[0].Message)
	}
	if v := res.Verdict(); v != chaos.Inconclusive {
		t.Fatalf("verdict %s with %d worker errors no outage explains; want %s", v, w.Unexplained(), chaos.Inconclusive)
	}
	if len(res.Coverage.Unexplained) == 0 || !strings.Contains(strings.Join(res.Coverage.Missing(), "\n"), "42P01") {
		t.Errorf("what the run cannot vouch for (%q) does not name the failed claims", res.Coverage.Missing())
	}
	// A saved history (bank-sim check FILE) says the same.
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var again chaos.History
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatal(err)
	}
	if v := chaos.Check(&again).Verdict(); v != chaos.Inconclusive || again.WorkerErrors.Unexplained() != w.Unexplained() {
		t.Errorf("the history read back is %s with %d unexplained errors; want %s with %d", v, again.WorkerErrors.Unexplained(), chaos.Inconclusive, w.Unexplained())
	}
}
