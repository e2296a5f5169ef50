package scenarios

import (
	"context"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
)

// The outbox makes the SMS exist if and only if the transfer committed, but
// its dispatcher can still send twice: it crashes after the provider accepted
// the SMS and before marking the row done, or the provider accepts and its
// answer is lost. The row is sent again, and only the row's id, passed as the
// provider's idempotency key, makes the second send the same message.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, w *World, protected bool) error {
		clock := r.Clock(t0)
		net := r.Network(w.Handler(clock, true, false), clock)
		r.Step("Ada sends ₦10,000 to Bola; the transfer commits with its SMS row in the outbox")
		if _, err := r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 1); err != nil {
			return err
		}
		r.Step("dispatcher A claims the row; the provider accepts the SMS; A crashes before marking the row done")
		if err := crashAfterSend(ctx, w.Dispatcher("A")); err != nil {
			return err
		}
		r.Server("dispatcher A died with the row claimed, not done; Ada's phone: %s", DescribeSMS(w.SMS.MessagesTo(1)))
		clock.Advance(31 * time.Second)
		r.Step("31 s later A's lease has expired: dispatcher B takes the row over and sends it again")
		b := w.Dispatcher("B")
		first, err := b.Drain(ctx)
		if err != nil {
			return err
		}

		r.Step("Ada sends ₦5,000 to Bola; this time the provider accepts the SMS and its answer is lost")
		again := Intent{Label: "ada-pays-bola-again", UserID: 1, Key: r.Key(),
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 500_000}}
		if _, err := r.SendWithRetries(ctx, net, again, 1); err != nil {
			return err
		}
		w.SMS.LoseNextAnswers(1)
		timedOut, err := b.Drain(ctx)
		if err != nil {
			return err
		}
		clock.Advance(outbox.DefaultBackoff)
		r.Step("after its backoff (%s) B sends the row again", outbox.DefaultBackoff)
		retried, err := b.Drain(ctx)
		if err != nil {
			return err
		}
		msgs := w.SMS.MessagesTo(1)
		r.Server("Ada's phone: %s", DescribeSMS(msgs))
		r.Expect(timedOut.Outcomes[outbox.Retry] == 1, "the lost answer is a failed attempt: the row waits out its backoff")
		if protected {
			r.Expect(first.Outcomes[outbox.AlreadySent] == 1, "after the crash the provider recognises the row's key: no second SMS")
			r.Expect(retried.Outcomes[outbox.AlreadySent] == 1, "after the timeout too: the provider had sent it, and says so")
			r.Expect(len(msgs) == 2, "Ada got two SMS, one per transfer")
			r.ExpectBalances(ctx, 3_500_000, 2_000_000, 2_000_000)
		} else {
			r.Expect(len(msgs) == 4, "Ada got four SMS for two transfers")
		}
		w.Check(ctx, outbox.World{SMS: w.SMS})
		return nil
	}

	Register(Scenario{
		Name:    "outbox-crash",
		Summary: "the dispatcher crashes after the provider accepted the SMS, and the provider's answer is lost: the row id as the provider's key makes each resend the same message",
		Phases: []Phase{{
			Title:   "without protection: the SMS sent without an idempotency key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World().With(outbox.Flaws{NoProviderKey: true}), false)
			},
		}, {
			Title: "with protection: the outbox row's id as the provider's idempotency key",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World(), true)
			},
		}},
	})
}
