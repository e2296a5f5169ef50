package bank

import (
	"context"
	"fmt"
	"time"
)

// Now reads the database's clock, bank_now(): the time that lock expiry and
// the age of keys are measured on.
func Now(ctx context.Context, q Querier) (time.Time, error) {
	var t time.Time
	if err := q.QueryRow(ctx, "SELECT bank_now()").Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return t, nil
}

// SetClock stops the database's clock at t: bank_now() reads t until it is
// set again. The simulator moves it by hand, as it moves its own clock.
func SetClock(ctx context.Context, q Querier, t time.Time) error {
	if _, err := q.Exec(ctx, "UPDATE sim_clock SET stopped_at = $1", t); err != nil {
		return fmt.Errorf("set the database's clock: %w", err)
	}
	return nil
}

// RunClock starts the database's clock again: bank_now() is now().
func RunClock(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, "UPDATE sim_clock SET stopped_at = NULL"); err != nil {
		return fmt.Errorf("start the database's clock: %w", err)
	}
	return nil
}
