package scenarios

import (
	"context"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// A key sent back with its JSON reordered, with another amount, by another
// user, not at all, and on a request that was refused.
func init() {
	story := func(ctx context.Context, r *Run, h *idem.Handler, protected bool) {
		net := r.Network(h, nil)
		const key = "tap-2026-09-24-0001"
		first := Intent{Label: "ada-10000", UserID: 1, Key: key,
			Request: AdaPaysBola}
		reordered := first
		reordered.Body = []byte(`{"amountKobo":1000000,"to":2,"from":1}`)
		other := Intent{Label: "ada-50000", UserID: 1, Key: key,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 5_000_000}}
		bola := Intent{Label: "bola-1000", UserID: 2, Key: key,
			Request: bank.TransferRequest{From: 2, To: 1, AmountKobo: 100_000}}
		noKey := Intent{Label: "ada-no-key", UserID: 1,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}}
		tooMuch := Intent{Label: "bola-too-much", UserID: 2, Key: "tap-2026-09-24-0002",
			Request: bank.TransferRequest{From: 2, To: 1, AmountKobo: 9_000_000}}

		a, _ := r.Send(ctx, net, first, 1, "first request")
		b, _ := r.Send(ctx, net, reordered, 2, "same, keys reordered")
		c, _ := r.Send(ctx, net, other, 1, "same key, other amount")
		d, _ := r.Send(ctx, net, bola, 1, "other user, same key")
		e, _ := r.Send(ctx, net, noKey, 1, "no key")
		f, _ := r.Send(ctx, net, tooMuch, 1, "too much")
		g, _ := r.Send(ctx, net, tooMuch, 2, "too much, retried")
		if !protected {
			return
		}
		lesson := r.Lesson()
		lesson.Expect(a.Status == 201 && !a.Replayed, "first request: 201")
		lesson.Expect(b.Status == 201 && b.Replayed, "same, keys reordered: 201 replayed")
		lesson.Expect(c.Status == 422 && c.Code() == idem.CodeKeyReused, "same key, other amount: 422 idempotency_key_reused")
		lesson.Expect(d.Status == 201 && !d.Replayed, "other user, same key: 201, their own transfer")
		lesson.Expect(e.Status == 400 && e.Code() == idem.CodeKeyRequired, "no key: 400 idempotency_key_required")
		lesson.Expect(f.Status == 422 && f.Code() == bank.CodeInsufficientFunds && !f.Replayed, "too much: 422 insufficient_funds")
		lesson.Expect(g.Status == 422 && g.Code() == bank.CodeInsufficientFunds && g.Replayed, "too much, retried: 422 replayed")
		lesson.ExpectBalances(ctx, 4_100_000, 1_400_000, 2_000_000)
		lesson.ExpectTransfers(ctx, 2)
	}

	Register(Scenario{
		Name:    "key-misuse",
		Title:   "Misuse: a reused key, another user, no key",
		Lesson:  "Misuse: a reused key, another user, no key",
		Order:   OrderKeyMisuse,
		Summary: "a key sent reordered (replay), with another amount (422), by another user (their own transfer), not at all (400), on a refusal (replayed refusal)",
		Explain: Explanation{
			Shows: "One key sent back five ways: the same request with its JSON members in another order, " +
				"the same key with ₦50,000 instead of ₦10,000, the same key string from another user, no " +
				"key at all, and a key whose first answer was a refusal.",
			Breaks: "A store that keeps no fingerprint of the request replays the ₦10,000 answer to the " +
				"₦50,000 request: the app is told a transfer succeeded that never happened. A store whose " +
				"keys are not scoped to the user hands Bola Ada's stored answer — someone else's transfer.",
			Defence: "Store a SHA-256 fingerprint of method, path and canonical JSON (members sorted) with " +
				"each key: reordered JSON is the same request and is replayed; another amount is answered " +
				"422 idempotency_key_reused. Keep keys under (user_id, key), so two users' keys never meet. " +
				"Require the key (400 without one), and store refusals like successes: a retry of a refused " +
				"transfer is refused again, replayed.",
			SQL: "PRIMARY KEY (user_id, key)  -- keys are scoped to the user\n" +
				"SELECT request_hash, status, response_status, response_body\n" +
				"  FROM idempotency_keys WHERE user_id = $1 AND key = $2;\n" +
				"-- request_hash <> the new request's fingerprint: 422 idempotency_key_reused",
		},
		Phases: []Phase{{
			Title:   "without protection: no request fingerprint, keys not scoped to the user",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.Store.Flaws = idem.Flaws{NoFingerprint: true, Unscoped: true}
				story(ctx, r, h, false)
				return nil
			},
		}, {
			Title: "with protection: keys scoped per user, SHA-256 fingerprint of the request",
			Run: func(ctx context.Context, r *Run) error {
				story(ctx, r, r.Handler(nil), true)
				return nil
			},
		}},
	})
}
