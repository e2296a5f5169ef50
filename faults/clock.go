package faults

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
)

// clockSyncTimeout bounds, by default, how long Advance keeps trying to move
// the database's clock: long enough for a PostgreSQL that was just killed to
// come back (chaos --kill-postgres), short enough to fail a run that went
// wrong. A run through a failover it waits for allows more (SetPatience).
const clockSyncTimeout = 15 * time.Second

// Clock is a clock that moves only when told to, so a scenario can jump 31
// seconds ahead without waiting 31 seconds.
//
// Locks and key ages are measured on the database's clock (bank_now()), not
// on an app server's. A Clock that Follows a database stops that database's
// clock at its own time and carries every Advance there, so both read the
// same. Its Now is also what the simulated app servers' clocks read (only the
// app-clock mistake measures locks on it).
type Clock struct {
	mu  sync.Mutex
	now time.Time

	sync   sync.Mutex // one write to the database at a time
	db     bank.Querier
	synced time.Time // the time last written to the database
	err    error
	// patience bounds each push; 0 is clockSyncTimeout.
	patience time.Duration
}

// NewClock returns a clock stopped at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Follow stops db's clock at this clock's time and makes every later Advance
// move it too.
func (c *Clock) Follow(ctx context.Context, db bank.Querier) error {
	c.sync.Lock()
	defer c.sync.Unlock()
	now := c.Now()
	if err := bank.SetClock(ctx, db, now); err != nil {
		return err
	}
	c.db, c.synced, c.err = db, now, nil
	return nil
}

// SetPatience bounds how long each Advance keeps trying to move the followed
// database's clock (15 s when never set): a run through a failover that may
// leave the cluster without a writable primary for longer gives its own
// bound.
func (c *Clock) SetPatience(d time.Duration) {
	c.sync.Lock()
	defer c.sync.Unlock()
	c.patience = d
}

// Advance moves the clock forward by d and returns the new time. A clock that
// follows a database moves the database's clock too, retrying for a while if
// PostgreSQL is unreachable; if it still cannot, Err says so, and the next
// Advance tries again.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.push()
	return now
}

// Err is the last failure to move the followed database's clock, or nil.
func (c *Clock) Err() error {
	c.sync.Lock()
	defer c.sync.Unlock()
	return c.err
}

// push writes the clock's time to the followed database. Writes are
// serialized and each carries the latest time, so concurrent Advances leave
// the database at the sum of all of them, and it never runs backwards.
func (c *Clock) push() {
	c.sync.Lock()
	defer c.sync.Unlock()
	if c.db == nil {
		return
	}
	patience := c.patience
	if patience <= 0 {
		patience = clockSyncTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	for {
		now := c.Now()
		if now.Equal(c.synced) && c.err == nil {
			return
		}
		err := bank.SetClock(ctx, c.db, now)
		if err == nil {
			c.synced, c.err = now, nil
			continue // another Advance may have come in meanwhile
		}
		select {
		case <-ctx.Done():
			c.err = fmt.Errorf("the database's clock could not follow the simulated clock for %s: %w", patience, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
