package scenarios

import (
	"context"
	"fmt"

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
	story := func(ctx context.Context, r *Run, w *World, rules ...func(*faults.Network)) (bank.Response, error) {
		net := r.Network(w.Handler(nil, false, true), nil)
		for _, rule := range rules {
			rule(net)
		}
		r.Step("Ada sends ₦10,000 to Bola; the bank publishes a transfer.created event for other services")
		return r.SendWithRetries(ctx, net, r.AdaTap("ada-pays-bola"), 3)
	}
	events := func(r *Run, w *World) []outbox.Record {
		recs := w.Log.Records(outbox.TransfersTopic)
		r.Server("the log's %s topic: %s", outbox.TransfersTopic, describeRecords(recs))
		return recs
	}

	Register(Scenario{
		Name:    "dual-write",
		Summary: "the transfer's event on the message log: published after the commit a crash loses it, published before it a rollback leaves an event for nothing; the outbox publishes one",
		Phases: []Phase{{
			Title:   "without protection: the event published after the commit, and the server crashes first",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{PublishAfterCommit: true})
				resp, err := story(ctx, r, w, func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 1) })
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "the retry is replayed: the transfer had committed")
				r.Expect(len(events(r, w)) == 0, "no event: other services never hear of the transfer")
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}, {
			Title:   "without protection: the event published before the commit, and the commit fails",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				w := r.World().With(outbox.Flaws{PublishInTransaction: true})
				resp, err := story(ctx, r, w, func(n *faults.Network) { n.On(&faults.FailBeforeCommit{}, 1) })
				r.Expect(err == nil && resp.Status == 201, "the retry transfers: 201")
				r.Expect(len(events(r, w)) == 2, "two events: one of them describes a transfer that rolled back")
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}, {
			Title: "with protection: an outbox row in the transfer's transaction, published by a dispatcher",
			Run: func(ctx context.Context, r *Run) error {
				w := r.World()
				resp, err := story(ctx, r, w,
					func(n *faults.Network) { n.On(&faults.FailBeforeCommit{}, 1) },
					func(n *faults.Network) { n.On(&faults.CrashAfterCommit{}, 2) })
				r.Expect(err == nil && resp.Status == 201 && resp.Replayed, "attempt 3 is replayed: attempt 2 had committed")
				r.Step("the dispatcher drains the outbox")
				if _, err := w.Dispatcher("dispatcher").Drain(ctx); err != nil {
					return err
				}
				recs := events(r, w)
				rc, _ := resp.Receipt()
				r.Expect(len(recs) == 1 && recs[0].TransferID == rc.TransferID,
					"exactly one event, about the transfer that committed")
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				w.Check(ctx, outbox.World{Log: w.Log})
				return nil
			},
		}},
	})
}

// describeRecords is how the story prints the log's records.
func describeRecords(recs []outbox.Record) string {
	if len(recs) == 0 {
		return "empty"
	}
	s := ""
	for i, rec := range recs {
		if i > 0 {
			s += ", "
		}
		s += rec.ID + " (transfer " + itoa(rec.TransferID) + ", partition " + itoa(int64(rec.Partition)) + " offset " + itoa(rec.Offset) + ")"
	}
	return s
}

func itoa(n int64) string { return fmt.Sprint(n) }
