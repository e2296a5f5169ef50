package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// BenchmarkDeterministic runs one seed's workload free and under the
// deterministic scheduler, side by side, and reports each one's intents/s
// (and the scheduler's steps/s): the ratio between them is what determinism
// costs (go test -bench Deterministic -benchtime 3x ./chaos).
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
			for b.Loop() {
				h, err := chaos.RunOn(context.Background(), scenarios.ServerBanks(pgtest.Server(b)), cfg, nil)
				if err != nil {
					b.Fatal(err)
				}
				if res := chaos.Check(h); !res.Valid() {
					b.Fatalf("%d violations", len(res.Violations))
				}
				w := h.Wall
				if w == 0 {
					w = h.Duration
				}
				wall += w
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
