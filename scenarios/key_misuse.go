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

		a, _ := r.Send(ctx, net, first, 1, "first request        ")
		b, _ := r.Send(ctx, net, reordered, 2, "same, keys reordered ")
		c, _ := r.Send(ctx, net, other, 1, "same key, other amount")
		d, _ := r.Send(ctx, net, bola, 1, "other user, same key ")
		e, _ := r.Send(ctx, net, noKey, 1, "no key               ")
		f, _ := r.Send(ctx, net, tooMuch, 1, "too much             ")
		g, _ := r.Send(ctx, net, tooMuch, 2, "too much, retried    ")
		if !protected {
			return
		}
		r.Expect(a.Status == 201 && !a.Replayed, "first request: 201")
		r.Expect(b.Status == 201 && b.Replayed, "same, keys reordered: 201 replayed")
		r.Expect(c.Status == 422 && c.Code() == idem.CodeKeyReused, "same key, other amount: 422 idempotency_key_reused")
		r.Expect(d.Status == 201 && !d.Replayed, "other user, same key: 201, their own transfer")
		r.Expect(e.Status == 400 && e.Code() == idem.CodeKeyRequired, "no key: 400 idempotency_key_required")
		r.Expect(f.Status == 422 && f.Code() == bank.CodeInsufficientFunds && !f.Replayed, "too much: 422 insufficient_funds")
		r.Expect(g.Status == 422 && g.Code() == bank.CodeInsufficientFunds && g.Replayed, "too much, retried: 422 replayed")
		r.ExpectBalances(ctx, 4_100_000, 1_400_000, 2_000_000)
		r.ExpectTransfers(ctx, 2)
	}

	Register(Scenario{
		Name:    "key-misuse",
		Summary: "a key reordered, reused for another amount, shared by another user, missing, and on a refusal",
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
