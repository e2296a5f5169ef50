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
		amount := bank.Naira(r.Amount())
		if secondTx {
			r.Step("Ada sends %s; the transfer commits on its own, then storing its answer fails just before COMMIT", amount)
		} else {
			r.Step("Ada sends %s; the one transaction, transfer and stored answer, fails just before COMMIT", amount)
		}
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}

	Register(Scenario{
		Name:    "fail-before-commit",
		Title:   "Storing the response in a second transaction",
		Lesson:  "Failure cases: storing the response in a second transaction",
		Order:   OrderFailureCases,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "the transaction fails just before COMMIT and the app retries: a response stored in a second transaction lets ₦20,000 move",
		Explain: Explanation{
			Shows: "The database connection breaks at the last moment of the server's work: after the " +
				"transfer and after its answer was written for the key, just before COMMIT. The server " +
				"answers 500, and Ada's app retries.",
			Breaks: "If the transfer commits in one transaction and the answer is stored in a second, the " +
				"failure hits only the second: the transfer is done, the key has no answer, and the server " +
				"releases the key after its 500. The retry finds no answer and transfers again.",
			Defence: "Commit the work and its stored answer together, in one transaction. A failure before " +
				"COMMIT rolls both back; the 500 is never stored (it says nothing about the request), the key " +
				"is released, and the retry transfers once. The ledger then holds transfer 2 and no " +
				"transfer 1: the rolled-back attempt had taken id 1, and a sequence never hands an id back.",
			SQL: "BEGIN;\n" +
				"  -- the transfer's statements …\n" +
				"  UPDATE idempotency_keys\n" +
				"     SET status = 'completed', response_status = 201, response_body = $5, …\n" +
				"   WHERE user_id = $1 AND key = $2 AND lock_id = $3;\n" +
				"COMMIT;  -- both, or neither",
		},
		Phases: []Phase{{
			Title:   "without protection: the response stored in a second transaction",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				resp, err := story(ctx, r, true)
				r.Lesson().Expect(err == nil && resp.Status == 201 && !resp.Replayed, "the retry transfers again: a new 201, not a replay")
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection: the transfer and its stored response in one transaction",
			Run: func(ctx context.Context, r *Run) error {
				resp, err := story(ctx, r, false)
				rc, _ := resp.Receipt()
				if rc.TransferID > 1 {
					r.Step("transfer %d, not 1: the rolled-back attempt had taken id 1, and a sequence never gives an id back", rc.TransferID)
				}
				r.Lesson().Expect(err == nil && resp.Status == 201 && !resp.Replayed,
					"the first attempt left nothing behind: the retry transfers, 201")
				r.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}
