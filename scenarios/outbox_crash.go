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
		r.Step("Ada sends ₦10,000 to Bola: the transfer and its SMS row commit")
		if _, err := r.SendSetup(ctx, net, r.AdaTap("ada-pays-bola"), 1, "₦10,000"); err != nil {
			return err
		}
		r.Step("dispatcher A sends the SMS, then crashes before marking the row done")
		if err := crashAfterSend(ctx, w.Dispatcher("A")); err != nil {
			return err
		}
		r.ServerAt(laneDispatchers, "dispatcher A died with the row claimed, not done; the provider has sent %s", plural(len(w.SMS.MessagesTo(1)), "SMS", "SMS"))
		clock.Advance(31 * time.Second)
		r.Step("31 s later A's lease has expired: dispatcher B sends the row again")
		b := w.Dispatcher("B")
		first, err := b.Drain(ctx)
		if err != nil {
			return err
		}
		crashed := smsFor(w.SMS.MessagesTo(1), 1)

		r.Step("Ada sends ₦5,000 to Bola; the provider sends its SMS, but its answer is lost")
		again := Intent{Label: "ada-pays-bola-again", UserID: 1, Key: r.Key(),
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 500_000}}
		if _, err := r.SendSetup(ctx, net, again, 1, "₦5,000"); err != nil {
			return err
		}
		w.SMS.LoseNextAnswers(1)
		timedOut, err := b.Drain(ctx)
		if err != nil {
			return err
		}
		clock.Advance(outbox.DefaultBackoff)
		r.Step("after a %s backoff B sends the row again", Dur(outbox.DefaultBackoff))
		retried, err := b.Drain(ctx)
		if err != nil {
			return err
		}
		lost := smsFor(w.Phone(1), 2)
		r.Expect(timedOut.Outcomes[outbox.Retry] == 1, "the lost answer is a failed send: the row waits out its backoff")
		if protected {
			r.Lesson().Expect(first.Outcomes[outbox.AlreadySent] == 1 && crashed == 1,
				"with the row's id as the provider's idempotency key, the resend after the crash is not a second SMS")
			r.Expect(retried.Outcomes[outbox.AlreadySent] == 1 && lost == 1,
				"after the lost answer too: the provider had sent it, and says so")
			r.ExpectBalances(ctx, 3_500_000, 2_000_000, 2_000_000)
		} else {
			r.Lesson().Expect(crashed == 2, "the dispatcher that crashed after sending, before marking, sends twice: Ada gets the SMS twice")
			r.Expect(lost == 2, "after the lost answer the row is sent again: Ada gets the ₦5,000 SMS twice")
		}
		w.Check(ctx, outbox.World{SMS: w.SMS})
		return nil
	}

	Register(Scenario{
		Name:    "outbox-crash",
		Title:   "The dispatcher that sends twice",
		Lesson:  "Side effects outside the database",
		Order:   OrderSideEffects + 10,
		Summary: "the dispatcher crashes after the provider sent the SMS, and the provider's answer is lost: with the row id as the provider's key each resend is the same message",
		Explain: Explanation{
			Shows: "The outbox makes an SMS exist if and only if its transfer committed. Its dispatcher " +
				"sends Ada's SMS and crashes before marking the row done; later, the provider sends " +
				"another of her SMS and the answer is lost on the way back.",
			Breaks: "Both times the dispatcher cannot know that the SMS left: the row is not done, so it " +
				"is sent again — by the dispatcher that takes the row over when the crashed one's lease " +
				"expires, or by the same one after its backoff. The provider sees a new message each " +
				"time, and Ada gets every SMS twice.",
			Defence: "Resending is unavoidable, so make it harmless, as the app does with its transfer: " +
				"the dispatcher passes the outbox row's id to the provider as an idempotency key. A " +
				"provider that has sent a message with that key answers with the first message and " +
				"sends nothing.",
			SQL: "-- the dispatcher claims a row, with a lease, then sends it with\n" +
				"-- Idempotency-Key: outbox-<id>, and only then marks it done:\n" +
				"UPDATE outbox SET done_at = now(), claim_token = NULL\n" +
				" WHERE id = $1 AND claim_token = $2;",
		},
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

// smsFor counts the messages about one transfer.
func smsFor(msgs []outbox.SMS, transfer int64) int {
	n := 0
	for _, m := range msgs {
		if m.TransferID == transfer {
			n++
		}
	}
	return n
}
