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
	story := func(ctx context.Context, r *Run, w *World, how string, rules ...func(*faults.Network)) (bank.Response, error) {
		net := r.Network(w.Handler(nil, true, false), nil)
		for _, rule := range rules {
			rule(net)
		}
		r.Step("Ada sends %s; %s", bank.Naira(r.Amount()), how)
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}
	failFirst := func(n *faults.Network) { n.On(&faults.FailBeforeCommit{}, 1) }
	crashSecond := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 2) }
	crashFirst := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 1) }
	text := func(r *Run) string { return "You sent " + bank.Naira(r.Amount()) + " to Bola" }

	Register(Scenario{
		Name:    "sms-side-effect",
		Title:   "An SMS the transaction cannot take back",
		Lesson:  "Side effects outside the database",
		Order:   OrderSideEffects,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "an SMS per transfer: sent inside the transaction, a failed commit still texts Ada; sent after it, a crash loses it; through the outbox, exactly one",
		Explain: Explanation{
			Shows: "The bank texts Ada \"You sent ₦10,000 to Bola\" for every transfer. Her first attempt's " +
				"COMMIT fails; in the protected run the server that commits her retry also crashes before " +
				"it can answer or do anything else.",
			Breaks: "PostgreSQL can roll a transfer back; it cannot take back a text message. Sent inside " +
				"the transaction, the SMS has left before the COMMIT fails: Ada is told about a transfer " +
				"that never happened. Sent after the COMMIT, it is lost when the server dies between the " +
				"two, and the retry is a replay, which sends nothing: a transfer with no SMS.",
			Defence: "The transfer's transaction only writes down that an SMS is owed: a row in an outbox " +
				"table. The row commits with the transfer or rolls back with it, so it exists if and " +
				"only if the transfer does. A separate worker, the dispatcher, reads the outbox, sends " +
				"each row's SMS and marks the row done: exactly one SMS per committed transfer, however " +
				"the server died.",
			SQL: "-- in the transfer's own transaction, after the transfer:\n" +
				"INSERT INTO outbox (kind, transfer_id, user_id, payload)\n" +
				"VALUES ('sms', $1, $2, 'You sent ₦10,000 to Bola');\n" +
				"-- later, the dispatcher: send the row's SMS, then\n" +
				"UPDATE outbox SET done_at = now() WHERE id = $1;",
		},
		Phases: []Phase{{
			Title:   "without protection: the SMS sent inside the transaction, and the commit fails",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{SMSInTransaction: true})
				resp, err := story(ctx, r, w, "the SMS leaves inside the transaction, then COMMIT fails", failFirst)
				r.Expect(err == nil && resp.Status == 201, "the retry transfers: 201")
				msgs := w.Phone(1)
				rc, _ := resp.Receipt()
				ghost := len(msgs) == 2 && msgs[0].TransferID != rc.TransferID && msgs[1].TransferID == rc.TransferID
				r.Lesson().Expect(ghost, "Ada gets an SMS for a transfer that did not happen")
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}, {
			Title:   "without protection: the SMS sent after the commit, and the server crashes first",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{SMSAfterCommit: true})
				resp, err := story(ctx, r, w, "the SMS would follow COMMIT, but the server crashes first", crashFirst)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is replayed: the transfer had committed")
				r.Lesson().Expect(len(w.Phone(1)) == 0, "no SMS is ever sent")
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}, {
			Title: "with protection: an outbox row in the transfer's transaction, sent by a dispatcher",
			Run: func(ctx context.Context, r *Run) error {
				w := r.World()
				resp, err := story(ctx, r, w, "the first COMMIT fails, the server dies after the second", failFirst, crashSecond)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "attempt 3 is replayed: attempt 2 had committed")
				r.Expect(len(w.SMS.Messages()) == 0, "no SMS has left yet: the transaction only wrote one down in the outbox")
				rc, _ := resp.Receipt()
				var rows []int64
				if qerr := r.DB.QueryRow(ctx, "SELECT coalesce(array_agg(transfer_id ORDER BY id), '{}') FROM outbox").Scan(&rows); qerr != nil {
					return qerr
				}
				r.Lesson().Expect(len(rows) == 1 && rows[0] == rc.TransferID,
					"the outbox row exists only for the transfer that committed (transfer %d)", rc.TransferID)
				r.Step("the outbox has %s, for transfer %s; a dispatcher sends it, marks it done",
					plural(len(rows), "row", "rows"), joinIDs(rows))
				if _, derr := w.Dispatcher("dispatcher").Drain(ctx); derr != nil {
					return derr
				}
				msgs := w.Phone(1)
				r.Lesson().Expect(len(msgs) == 1 && msgs[0].TransferID == rc.TransferID && msgs[0].Text == text(r),
					"Ada gets %q once, for the transfer that committed", text(r))
				r.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{SMS: w.SMS})
				return nil
			},
		}},
	})
}
