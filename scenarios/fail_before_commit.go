package scenarios

import (
	"context"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
)

// The database fails the server's transaction just before COMMIT. With the
// transfer and its stored response in one transaction, both roll back and the
// retry transfers once. With the response stored in a second transaction, the
// transfer has already committed, and the retry transfers again.
func init() {
	story := func(ctx context.Context, r *Run, secondTx bool) (bank.Response, error) {
		h := r.Handler(nil)
		h.SecondTransaction = secondTx
		net := r.Network(h, nil).On(&faults.FailBeforeCommit{}, 1)
		r.Step("Ada sends ₦10,000 to Bola; the first attempt's transaction fails just before COMMIT")
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}

	Register(Scenario{
		Name:    "fail-before-commit",
		Summary: "the transaction fails just before COMMIT and the app retries: a response stored separately lets ₦20,000 move",
		Phases: []Phase{{
			Title:   "without protection: the response stored in a second transaction",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				resp, err := story(ctx, r, true)
				r.Expect(err == nil && resp.Status == 201 && !resp.Replayed, "the retry is a new 201, not a replay")
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: the transfer and its stored response in one transaction",
			Run: func(ctx context.Context, r *Run) error {
				resp, err := story(ctx, r, false)
				r.Expect(err == nil && resp.Status == 201 && !resp.Replayed,
					"the first attempt left nothing behind: the retry transfers, 201")
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}
