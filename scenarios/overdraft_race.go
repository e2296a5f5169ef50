package scenarios

import (
	"context"
	"fmt"
	"sync"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// Ada's app sends many small transfers at the same moment, each its own
// intent with its own key, so that they race inside PostgreSQL for her
// balance. The conditional debit under a row lock makes them take turns; a
// balance read, compared and written back in separate steps loses debits.
func init() {
	const (
		rounds = 5
		// Every tap starts behind one barrier, each on its own pooled
		// connection: as many as the phase's pool holds.
		taps   = PoolSize
		amount = 100_000 // ₦1,000
	)
	race := func(ctx context.Context, r *Run, h *idem.Handler) (created int) {
		net := r.Network(h, nil)
		for round := 1; round <= rounds; round++ {
			intents := make([]Intent, taps)
			for i := range intents {
				intents[i] = Intent{Label: fmt.Sprintf("ada-race-%d-%d", round, i+1), UserID: 1, Key: r.Key(),
					Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: amount}}
			}
			start := make(chan struct{})
			results := make([]bank.Response, taps)
			var wg sync.WaitGroup
			for i, in := range intents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i], _ = r.SendWithRetries(ctx, net, in, 3)
				}()
			}
			close(start)
			wg.Wait()
			for _, resp := range results {
				if resp.Status == 201 {
					created++
				}
			}
		}
		return created
	}

	Register(Scenario{
		Name:    "overdraft-race",
		Summary: fmt.Sprintf("%d rounds of %d concurrent ₦1,000 transfers from Ada: a read-compare-write loses debits", rounds, taps),
		Phases: []Phase{{
			Title:   "without protection: the balance read before the row lock, compared, and written back",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.Bank = bank.Flaws{ReadCompareWrite: true}
				r.Step("Ada's app sends %d transfers of ₦1,000 at the same moment, %d times", taps, rounds)
				race(ctx, r, h)
				return nil
			},
		}, {
			Title: "with protection: a row lock and a conditional debit in one statement",
			Run: func(ctx context.Context, r *Run) error {
				r.Step("Ada's app sends %d transfers of ₦1,000 at the same moment, %d times", taps, rounds)
				created := race(ctx, r, r.Handler(nil))
				r.Expect(created == rounds*taps, "all %d transfers succeed, one after another (%d did)", rounds*taps, created)
				r.ExpectBalances(ctx, 5_000_000-rounds*taps*amount, 500_000+rounds*taps*amount, 2_000_000)
				r.ExpectTransfers(ctx, rounds*taps)
				return nil
			},
		}},
	})
}
