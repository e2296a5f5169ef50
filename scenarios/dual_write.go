package scenarios

import (
	"context"
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/outbox"
)

// Other services hear of a transfer through an event on the message log.
// PostgreSQL and the log are two systems, and no transaction spans both: the
// dual write. Published after the commit, a crash in between loses the
// event; published before it, a rollback leaves an event for nothing. The
// outbox records the event in the transfer's transaction and a dispatcher
// publishes it: one event per committed transfer.
func init() {
	story := func(ctx context.Context, r *Run, w *World, how string, rules ...func(*faults.Network)) (bank.Response, error) {
		net := r.Network(w.Handler(nil, false, true), nil)
		for _, rule := range rules {
			rule(net)
		}
		r.Step("Ada sends %s; %s", bank.Naira(r.Amount()), how)
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}
	crashFirst := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 1) }
	failFirst := func(n *faults.Network) { n.On(&faults.FailBeforeCommit{}, 1) }
	crashSecond := func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 2) }

	Register(Scenario{
		Name:    "dual-write",
		Title:   "The dual write: PostgreSQL and the message log",
		Article: "Phase 3 (the dual-write problem) and Phase 4 (the transactional outbox)",
		Order:   OrderArticleDualWrite,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "the transfer's event on the message log: published after the commit, a crash loses it; published before, a rollback leaves an event for nothing; the outbox publishes one",
		Explain: Explanation{
			Shows: "Other services (fraud checks, statements, notifications) learn of Ada's transfer " +
				"from a transfer.created event on a message log, bank-sim's stand-in for Kafka. Her " +
				"first attempt's server crashes right after its COMMIT, or its COMMIT fails.",
			Breaks: "PostgreSQL and the log are two systems, and no transaction spans both. Publish " +
				"after the COMMIT and a crash in between loses the event for good: the retry is a " +
				"replay, which publishes nothing. Publish before the COMMIT and a COMMIT that fails " +
				"leaves an event about a transfer that does not exist, which the other services act on.",
			Defence: "The transactional outbox again: the transfer's transaction inserts the event as a " +
				"row of the outbox, so it commits or rolls back with the transfer, and a dispatcher " +
				"publishes it afterwards. The log may get an event twice (a dispatcher can crash " +
				"after publishing); its consumers deal with that (consumer-redelivery).",
			SQL: "-- in the transfer's own transaction, after the transfer:\n" +
				"INSERT INTO outbox (kind, transfer_id, topic, msg_key, payload)\n" +
				"VALUES ('event', $1, 'transfers', $2, $3);\n" +
				"-- a dispatcher publishes it to the log, then marks it done",
		},
		Phases: []Phase{{
			Title:   "without protection: the event published after the commit, and the server crashes first",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{PublishAfterCommit: true})
				resp, err := story(ctx, r, w, "the event would follow COMMIT, but the server dies first", crashFirst)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is replayed: the transfer had committed")
				r.Expect(len(w.Topic()) == 0, "no event: other services never hear of the transfer")
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}, {
			Title:   "without protection: the event published before the commit, and the commit fails",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{PublishInTransaction: true})
				resp, err := story(ctx, r, w, "the event leaves inside the transaction, then COMMIT fails", failFirst)
				r.Expect(err == nil && resp.Status == 201, "the retry transfers: 201")
				r.Expect(len(w.Topic()) == 2, "two events: one of them is about a transfer that rolled back")
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}, {
			Title: "with protection: an outbox row in the transfer's transaction, published by a dispatcher",
			Run: func(ctx context.Context, r *Run) error {
				w := r.World()
				resp, err := story(ctx, r, w, "the first COMMIT fails, the server dies after the second", failFirst, crashSecond)
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "attempt 3 is replayed: attempt 2 had committed")
				r.Step("the dispatcher publishes what the outbox holds")
				if _, err := w.Dispatcher("dispatcher").Drain(ctx); err != nil {
					return err
				}
				recs := w.Topic()
				rc, _ := resp.Receipt()
				r.Expect(len(recs) == 1 && recs[0].TransferID == rc.TransferID,
					"exactly one event, about the transfer that committed")
				r.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}},
	})
}

// Topic tells the story what the log's transfers topic holds, and returns
// its records.
func (w *World) Topic() []outbox.Record {
	recs := w.Log.Records(outbox.TransfersTopic)
	w.r.Step("the log's %s topic: %s", outbox.TransfersTopic, describeRecords(recs))
	return recs
}

// describeRecords is how the story prints the log's records: "2 events,
// for transfers 1 and 2".
func describeRecords(recs []outbox.Record) string {
	if len(recs) == 0 {
		return "no event"
	}
	var ids []string
	for _, rec := range recs {
		ids = append(ids, fmt.Sprint(rec.TransferID))
	}
	if len(recs) == 1 {
		return "1 event, for transfer " + ids[0]
	}
	return fmt.Sprintf("%d events, for transfers %s and %s", len(recs),
		strings.Join(ids[:len(ids)-1], ", "), ids[len(ids)-1])
}
