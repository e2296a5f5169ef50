package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// BenchmarkDeterministic runs one seed's workload free and under the
// deterministic scheduler, side by side, and reports each one's intents/s
// (and the scheduler's steps/s): the ratio between them is what determinism
// costs (go test -bench Deterministic -benchtime 3x ./chaos). Each run is
// timed from the opening of its pool to its history.
func BenchmarkDeterministic(b *testing.B) {
	base := chaos.Config{Seed: 1, Clients: 8, Intents: 400}
	for _, det := range []bool{false, true} {
		name := "free"
		if det {
			name = "deterministic"
		}
		b.Run(name, func(b *testing.B) {
			cfg := base
			cfg.Deterministic = det
			var wall time.Duration
			var steps, intents int
			ctx := context.Background()
			for b.Loop() {
				// Timed: the pool's opening (a deterministic one opens its
				// connections before the run) and the run; not the bank's
				// creation, the same for both.
				b.StopTimer()
				db, err := banks.OnServer(pgtest.Server(b), banks.Options{}).NewBank(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				began := time.Now()
				pool, err := chaos.PoolFor(ctx, db.Pool, cfg)
				if err != nil {
					b.Fatal(err)
				}
				h, err := chaos.RunWith(ctx, pool, cfg, chaos.Options{})
				if err != nil {
					b.Fatal(err)
				}
				wall += time.Since(began)
				b.StopTimer()
				pool.Close()
				db.Close()
				b.StartTimer()
				if res := chaos.Check(h); !res.Valid() {
					b.Fatalf("%d violations", len(res.Violations))
				}
				intents += len(h.Intents)
				if h.Deterministic != nil {
					steps += h.Deterministic.Steps
				}
			}
			b.ReportMetric(float64(intents)/wall.Seconds(), "intents/s")
			if steps > 0 {
				b.ReportMetric(float64(steps)/wall.Seconds(), "steps/s")
			}
		})
	}
}
