package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// Consumer is an idempotent consumer of transfer events: for each event it
// writes a notification for the recipient ("You received ₦10,000 from Ada"),
// and commits, in the same transaction, a processed-events marker under the
// event's id. A redelivery finds the marker and has no second effect. It
// commits the event's offset in the log only after that transaction, so a
// crash in between means a redelivery, never a lost event.
type Consumer struct {
	DB bank.DB
	// Name is the consumer's group in the log and the scope of its markers.
	Name  string
	Flaws Flaws
	// Between runs between the consumer's two steps for a record, the
	// effect's commit and the offset's, in whichever order the code runs
	// them. An error is a crash: the consumer stops there.
	Between func(ctx context.Context, r Record) error
	// AfterEffect runs between the effect's commit and the marker's, when
	// the code commits them apart (MarkerAfterEffect); the correct consumer
	// commits both in one transaction and never calls it. An error is a
	// crash: the consumer stops there.
	AfterEffect func(ctx context.Context, r Record) error
	// Note, when set, is told what each record did.
	Note func(format string, args ...any)
}

func (c *Consumer) note(format string, args ...any) {
	if c.Note != nil {
		c.Note(format, args...)
	}
}

// Process handles one delivered record: the effect, then the offset.
// applied is false for a redelivery that found its marker.
func (c *Consumer) Process(ctx context.Context, s *Session, r Record) (applied bool, err error) {
	if c.Flaws.OffsetBeforeEffect {
		// The mistake: the log is told the event is done before it is; a
		// crash before the effect loses it.
		if err := s.Commit(r); err != nil {
			return false, err
		}
		if err := c.between(ctx, r); err != nil {
			return false, err
		}
		return c.Apply(ctx, r)
	}
	if applied, err = c.Apply(ctx, r); err != nil {
		return applied, err // applied: a crash after the effect's commit
	}
	if err := c.between(ctx, r); err != nil {
		return applied, err
	}
	return applied, s.Commit(r)
}

func (c *Consumer) between(ctx context.Context, r Record) error {
	if c.Between != nil {
		return c.Between(ctx, r)
	}
	return nil
}

// Apply commits the marker and the effect of r in one transaction, and
// reports whether it applied them (false: the marker was there already).
// Two deliveries of one event at once are safe: the second INSERT of the
// marker waits for the first transaction and then finds the conflict.
func (c *Consumer) Apply(ctx context.Context, r Record) (applied bool, err error) {
	var ev Event
	if err := json.Unmarshal(r.Value, &ev); err != nil {
		return false, fmt.Errorf("event %s: %w", r.ID, err)
	}
	if c.Flaws.MarkerAfterEffect {
		return c.applyThenMark(ctx, r, ev)
	}
	err = pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error {
		applied = false
		if !c.Flaws.NoDedup {
			tag, err := tx.Exec(ctx,
				"INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING", c.Name, r.ID)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return nil // a redelivery: applied once already
			}
		}
		if err := c.notify(ctx, tx, r, ev); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("consume event %s: %w", r.ID, err)
	}
	c.noteApplied(r, applied)
	return applied, nil
}

// notify is the effect: the recipient's notification, in tx.
func (c *Consumer) notify(ctx context.Context, tx pgx.Tx, r Record, ev Event) error {
	var sender string
	if err := tx.QueryRow(ctx, "SELECT holder FROM accounts WHERE id = $1", ev.From).Scan(&sender); err != nil {
		return fmt.Errorf("read the sender's name: %w", err)
	}
	text := fmt.Sprintf("You received %s from %s", bank.Naira(ev.AmountKobo), bank.Account{Holder: sender}.FirstName())
	_, err := tx.Exec(ctx,
		"INSERT INTO notifications (consumer, event_id, transfer_id, account_id, text) VALUES ($1, $2, $3, $4, $5)",
		c.Name, r.ID, ev.TransferID, ev.To, text)
	return err
}

func (c *Consumer) noteApplied(r Record, applied bool) {
	if applied {
		c.note("%s: event %s (offset %d): notification written", c.Name, r.ID, r.Offset)
	} else {
		c.note("%s: event %s (offset %d): already processed, skipped", c.Name, r.ID, r.Offset)
	}
}

// applyThenMark is the MarkerAfterEffect mistake's Apply: check the marker,
// commit the effect, then commit the marker in a transaction of its own. A
// crash between the two commits (AfterEffect) leaves the effect without its
// marker, and the redelivery applies it again.
func (c *Consumer) applyThenMark(ctx context.Context, r Record, ev Event) (applied bool, err error) {
	var seen bool
	if err := c.DB.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM processed_events WHERE consumer = $1 AND event_id = $2)",
		c.Name, r.ID).Scan(&seen); err != nil {
		return false, fmt.Errorf("consume event %s: %w", r.ID, err)
	}
	if seen {
		c.noteApplied(r, false)
		return false, nil
	}
	if err := pgx.BeginFunc(ctx, c.DB, func(tx pgx.Tx) error { return c.notify(ctx, tx, r, ev) }); err != nil {
		return false, fmt.Errorf("consume event %s: %w", r.ID, err)
	}
	c.noteApplied(r, true)
	if c.AfterEffect != nil {
		if err := c.AfterEffect(ctx, r); err != nil {
			return true, err // the effect committed; its marker never will
		}
	}
	// The mistake: the marker's own transaction, after the effect's.
	if _, err := c.DB.Exec(ctx, "INSERT INTO processed_events (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
		c.Name, r.ID); err != nil {
		return true, fmt.Errorf("mark event %s processed: %w", r.ID, err)
	}
	return true, nil
}

// Run polls s and processes every record until none is left, or until a
// record fails (a crash): then it returns the error, and the records after
// the last committed offset will be delivered again to the next session.
func (c *Consumer) Run(ctx context.Context, s *Session) (applied, skipped int, err error) {
	for {
		recs := s.Poll(16)
		if len(recs) == 0 {
			return applied, skipped, nil
		}
		for _, r := range recs {
			ok, err := c.Process(ctx, s, r)
			switch {
			case ok:
				applied++ // even if it crashed after: the effect committed
			case err == nil:
				skipped++
			}
			if err != nil {
				return applied, skipped, err
			}
		}
	}
}
