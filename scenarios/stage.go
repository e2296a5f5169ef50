package scenarios

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Staging: the concurrent stories order their requests with hooks and
// barriers (idem.Hooks, bank.WithAfterChecks, channels), never with sleeps,
// so that each shows what its title promises on every run. The waits below
// are for states PostgreSQL reaches within milliseconds; their limit only
// turns a stuck database into an error instead of a hang.

// stageTimeout bounds every wait of a staged story.
const stageTimeout = 10 * time.Second

// waitForLockWaiters returns once at least n sessions of the phase's
// database are waiting for a lock held by another: the moment a request has
// reached a row another holds.
func waitForLockWaiters(ctx context.Context, r *Run, n int) error {
	_, err := waitForLockWaitersOr(ctx, r, n, nil)
	return err
}

// waitForLockWaitersOr is waitForLockWaiters that also ends, reporting
// false, when instead closes: a request that should have queued for a row
// may, under a mistake, have gone past it without waiting.
func waitForLockWaitersOr(ctx context.Context, r *Run, n int, instead <-chan struct{}) (bool, error) {
	deadline := time.Now().Add(stageTimeout)
	for {
		var waiting int
		if err := r.DB.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			return false, err
		}
		if waiting >= n {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("staging: %d of %d requests waited for a row lock within %s", waiting, n, stageTimeout)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-instead: // nil: never
			return false, nil
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// await waits for ch to close, for what, within stageTimeout.
func await(ctx context.Context, ch <-chan struct{}, what string) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(stageTimeout):
		return errors.New("staging: waited " + stageTimeout.String() + " for " + what)
	}
}
