package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
	"github.com/jackc/pgx/v5"
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
		r.Step("Ada sends Bola ₦1,000, ₦2,000 and ₦3,000; a dispatcher publishes 3 events")
		for i, naira := range []int64{1_000, 2_000, 3_000} {
			in := Intent{Label: fmt.Sprintf("ada-pays-bola-%d", i+1), UserID: 1, Key: r.Key(),
				Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: naira * 100}}
			if _, err := r.SendSetup(ctx, net, in, 1, bank.Naira(in.Request.AmountKobo)); err != nil {
				return first, second, err
			}
		}
		if _, err := w.Dispatcher("dispatcher").Drain(ctx); err != nil {
			return first, second, err
		}
		recs := w.Log.Records(outbox.TransfersTopic)
		r.ServerAt(laneDispatchers, "the log's %s topic: %s", outbox.TransfersTopic, describeRecords(recs))
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
		applied, skipped, err := c.Run(ctx, w.Log.Join(group, outbox.TransfersTopic))
		if !errors.Is(err, errConsumerCrashed) {
			return first, second, fmt.Errorf("the notifier should have crashed on %s, got %v", crashOn, err)
		}
		first = [2]int{applied, skipped}
		r.Step("the notifier applies events 1 and 2, and dies before it commits 2's offset")
		r.ServerAt(group, "%s; the group's committed offset is %d", errConsumerCrashed, w.Log.Committed(group, outbox.TransfersTopic)[recs[1].Partition])

		c.Between = nil
		applied, skipped, err = c.Run(ctx, w.Log.Join(group, outbox.TransfersTopic))
		if err != nil {
			return first, second, err
		}
		second = [2]int{applied, skipped}
		// The crash was staged on event 2: the log owes it again, and 3.
		switch second {
		case [2]int{1, 1}:
			r.Step("restarted, it gets events 2 and 3: it skips 2, already processed, applies 3")
		case [2]int{2, 0}:
			r.Step("restarted, it gets events 2 and 3, and applies both")
		default:
			r.Step("restarted, it applies %s and skips %s", plural(applied, "event", "events"), plural(skipped, "event", "events"))
		}
		if _, err := w.Notifications(ctx, group, 2); err != nil {
			return first, second, err
		}
		w.Check(ctx, outbox.World{Log: w.Log, Consumer: group})
		return first, second, nil
	}

	Register(Scenario{
		Name:    "consumer-redelivery",
		Title:   "The event delivered twice",
		Article: "Phase 5, “Make Kafka consumers idempotent”",
		Order:   OrderArticleConsumer,
		Summary: "the consumer crashes after its effect and before committing its offset: the event is redelivered, and the processed-events marker makes it one effect",
		Explain: Explanation{
			Shows: "A notifier consumes the transfer events from the log and writes Bola a notification " +
				"for each (\"You received ₦2,000 from Ada\"). It crashes after writing one, before it " +
				"commits that event's offset in the log, and restarts.",
			Breaks: "The log delivers at least once: a consumer's place in it is its last committed " +
				"offset, so after the crash it is delivered the event again. Without a record of what " +
				"it has processed, it writes the notification a second time. (Committing the offset " +
				"first is no cure: a crash after it loses the event instead.)",
			Defence: "Commit a processed-events marker, keyed by the event's id, in the same transaction " +
				"as the effect, and the offset only after that transaction. A redelivered event finds " +
				"its marker and does nothing: at-least-once delivery plus idempotent processing is " +
				"effectively once.",
			SQL: "BEGIN;\n" +
				"INSERT INTO processed_events (consumer, event_id)\n" +
				"VALUES ('notifier', $1) ON CONFLICT DO NOTHING;\n" +
				"-- no row inserted: a redelivery; stop here\n" +
				"INSERT INTO notifications (event_id, account_id, text)\n" +
				"VALUES ($1, $2, $3);\n" +
				"COMMIT;\n" +
				"-- then commit the event's offset in the log",
		},
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

// Notifications tells the story what the consumer group wrote to the
// account's holder, and returns the texts.
func (w *World) Notifications(ctx context.Context, group string, account int64) ([]string, error) {
	rows, err := w.r.DB.Query(ctx, "SELECT text FROM notifications WHERE consumer = $1 AND account_id = $2 ORDER BY id", group, account)
	if err != nil {
		return nil, err
	}
	texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var parts []string
	for i := 0; i < len(texts); {
		j := i + 1
		for j < len(texts) && texts[j] == texts[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%q%s", texts[i], times(j-i)))
		i = j
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	w.r.Step("%s's notifications: %s", holder(account), strings.Join(parts, ", "))
	return texts, nil
}
