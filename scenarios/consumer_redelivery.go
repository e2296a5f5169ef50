package scenarios

import (
	"context"
	"errors"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
)

// errConsumerCrashed is the crash the story injects into the consumer.
var errConsumerCrashed = errors.New("the consumer process crashed")

// A notifier consumes the transfer events and writes Bola a notification
// for each. It crashes between its effect and its offset commit; restarted,
// it is delivered again everything after the committed offset: at least
// once. Its processed-events marker, committed in the effect's own
// transaction, makes the redelivery a no-op.
func init() {
	const group = "notifier"
	story := func(ctx context.Context, r *Run, w *World) (first, second [2]int, err error) {
		net := r.Network(w.Handler(nil, false, true), nil)
		r.Step("Ada makes three transfers to Bola; each commits an event row in the outbox, and the dispatcher publishes them")
		for i, naira := range []int64{1_000, 2_000, 3_000} {
			in := Intent{Label: fmt.Sprintf("ada-pays-bola-%d", i+1), UserID: 1, Key: r.Key(),
				Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: naira * 100}}
			if _, err := r.SendWithRetries(ctx, net, in, 1); err != nil {
				return first, second, err
			}
		}
		if _, err := w.Dispatcher("dispatcher").Drain(ctx); err != nil {
			return first, second, err
		}
		recs := w.Log.Records(outbox.TransfersTopic)
		r.Server("the log's %s topic: %s", outbox.TransfersTopic, describeRecords(recs))
		if len(recs) != 3 {
			return first, second, fmt.Errorf("expected 3 events in the log, found %d", len(recs))
		}

		c := w.Consumer(group)
		crashOn := recs[1].ID
		c.Between = func(_ context.Context, rec outbox.Record) error {
			if rec.ID == crashOn {
				return errConsumerCrashed
			}
			return nil
		}
		r.Step("the notifier processes the events; on the second it crashes between its two steps, the effect and the offset commit")
		applied, skipped, err := c.Run(ctx, w.Log.Join(group, outbox.TransfersTopic))
		if !errors.Is(err, errConsumerCrashed) {
			return first, second, fmt.Errorf("the notifier should have crashed on %s, got %v", crashOn, err)
		}
		first = [2]int{applied, skipped}
		r.Server("%s; the group's committed offset is %d", errConsumerCrashed, w.Log.Committed(group, outbox.TransfersTopic)[recs[1].Partition])

		r.Step("the notifier restarts: the log delivers again everything after the committed offset")
		c.Between = nil
		applied, skipped, err = c.Run(ctx, w.Log.Join(group, outbox.TransfersTopic))
		if err != nil {
			return first, second, err
		}
		second = [2]int{applied, skipped}
		w.Check(ctx, outbox.World{Log: w.Log, Consumer: group})
		return first, second, nil
	}

	Register(Scenario{
		Name:    "consumer-redelivery",
		Summary: "the consumer crashes after its effect and before committing its offset: the event is redelivered, and the processed-events marker makes it one effect",
		Phases: []Phase{{
			Title:   "without protection: a consumer with no processed-events marker",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				_, second, err := story(ctx, r, r.World().With(outbox.Flaws{NoDedup: true}))
				r.Expect(err == nil && second == [2]int{2, 0}, "the redelivered event is applied again: Bola is notified twice of one transfer")
				return err
			},
		}, {
			Title: "with protection: the marker and the effect in one transaction, the offset committed after",
			Run: func(ctx context.Context, r *Run) error {
				first, second, err := story(ctx, r, r.World())
				r.Expect(err == nil && first == [2]int{2, 0}, "before the crash: two events applied, the second not yet committed in the log")
				r.Expect(err == nil && second == [2]int{1, 1}, "after the restart: the second event is redelivered and skipped, the third applied")
				r.ExpectBalances(ctx, 4_400_000, 1_100_000, 2_000_000)
				return err
			},
		}},
	})
}
