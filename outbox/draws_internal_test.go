package outbox

import (
	"fmt"
	"testing"
)

// A fault's consecutive tries on one id are independent draws at its rate:
// a dispatcher that crashed on a row crashes on it again at about rate r,
// not every time, and the two draws agree about r²+(1−r)² of the time.
// The FNV-1a hash of "seed/fault/id/n" barely moves its top bits with the
// try's number n, so that unmixed, tries 1–9 of a row decide exactly as try
// 0 did. Catches any draw taken without the splitmix64 finalizer.
func TestAFaultsTriesOnOneIdAreIndependent(t *testing.T) {
	t.Parallel()
	const ids, tries = 2000, 10
	for _, fault := range PipelineFaults() {
		for _, rate := range []float64{0.1, 0.3, 0.5} {
			p := NewPipeline(nil, NewProvider(1), nil, PipelineConfig{Seed: 42, Rates: map[string]float64{fault: rate}})
			var pairs, agree, after, again int
			for id := range ids {
				prev := p.fires(fault, fmt.Sprint(id))
				for range tries - 1 {
					next := p.fires(fault, fmt.Sprint(id))
					pairs++
					if next == prev {
						agree++
					}
					if prev {
						after++
						if next {
							again++
						}
					}
					prev = next
				}
			}
			want := rate*rate + (1-rate)*(1-rate)
			got := float64(agree) / float64(pairs)
			if got < want-0.03 || got > want+0.03 {
				t.Errorf("%s at rate %.1f: %d of %d consecutive tries on one id agree (%.3f), want about %.3f", fault, rate, agree, pairs, got, want)
			}
			if after == 0 {
				t.Errorf("%s at rate %.1f: never fired in %d tries", fault, rate, pairs)
				continue
			}
			if r := float64(again) / float64(after); r < rate-0.05 || r > rate+0.05 {
				t.Errorf("%s at rate %.1f: fired again after a fire %d times of %d (%.3f), want about %.1f", fault, rate, again, after, r, rate)
			}
		}
	}
}
