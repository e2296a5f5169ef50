package scenarios

import (
	"context"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/outbox"
)

// The transfer must also send Ada "You sent ₦10,000 to Bola". Sent inside
// the transaction, it leaves before a commit that then fails: Ada is told
// about a transfer that never happened. Sent after the commit, it is lost
// when the server crashes in between. Recorded as an outbox row in the
// transfer's transaction, it exists if and only if the transfer committed,
// and a dispatcher sends it later: exactly one SMS.
func init() {
	story := func(ctx context.Context, r *Run, w *World, rules ...func(*faults.Network)) (bank.Response, error) {
		net := r.Network(w.Handler(nil, true, false), nil)
		for _, rule := range rules {
			rule(net)
		}
		r.Step("Ada sends ₦10,000 to Bola, and the bank texts her about it")
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}
	failFirst := func(n *faults.Network) { n.On(&faults.FailBeforeCommit{}, 1) }
	crashSecond := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 2) }
	crashFirst := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 1) }
	phone := func(r *Run, w *World) []outbox.SMS {
		msgs := w.SMS.MessagesTo(1)
		r.Server("Ada's phone: %s", DescribeSMS(msgs))
		return msgs
	}

	Register(Scenario{
		Name:    "sms-side-effect",
		Summary: "an SMS per transfer: sent inside the transaction a failed commit still texts Ada; sent after it a crash loses it; through the outbox exactly one",
		Phases: []Phase{{
			Title:   "without protection: the SMS sent inside the transaction, and the commit fails",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{SMSInTransaction: true})
				resp, err := story(ctx, r, w, failFirst)
				r.Expect(err == nil && resp.Status == 201, "the retry transfers: 201")
				msgs := phone(r, w)
				r.Expect(len(msgs) == 2, "Ada got two SMS for one transfer: one of them is about a transfer that rolled back")
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}, {
			Title:   "without protection: the SMS sent after the commit, and the server crashes first",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{SMSAfterCommit: true})
				resp, err := story(ctx, r, w, crashFirst)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is replayed: the transfer had committed")
				msgs := phone(r, w)
				r.Expect(len(msgs) == 0, "no SMS: the server died between the commit and the send, and a replay sends nothing")
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}, {
			Title: "with protection: an outbox row in the transfer's transaction, sent by a dispatcher",
			Run: func(ctx context.Context, r *Run) error {
				w := r.World()
				resp, err := story(ctx, r, w, failFirst, crashSecond)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "attempt 3 is replayed: attempt 2 had committed")
				r.Expect(len(w.SMS.Messages()) == 0, "no SMS has left yet: the transaction only recorded one in the outbox")
				r.Step("the dispatcher drains the outbox")
				rep, derr := w.Dispatcher("dispatcher").Drain(ctx)
				if derr != nil {
					return derr
				}
				r.Expect(rep.Claimed == 1, "the outbox held one row: the rolled-back attempt's row rolled back with it")
				msgs := phone(r, w)
				rc, _ := resp.Receipt()
				r.Expect(len(msgs) == 1 && msgs[0].TransferID == rc.TransferID && msgs[0].Text == "You sent ₦10,000 to Bola",
					"Ada got exactly one SMS, \"You sent ₦10,000 to Bola\", about the transfer that committed")
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}},
	})
}
