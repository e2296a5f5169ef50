package faults

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// outageDB is a database whose writes fail until its outage ends; it keeps
// the last time written to sim_clock. Only Exec is used by SetClock.
type outageDB struct {
	mu    sync.Mutex
	until time.Time // writes fail before this
	set   []time.Time
}

func (d *outageDB) Exec(_ context.Context, _ string, args ...any) (pgconn.CommandTag, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Now().Before(d.until) {
		return pgconn.CommandTag{}, errors.New("the database is failing over")
	}
	d.set = append(d.set, args[0].(time.Time))
	return pgconn.NewCommandTag("UPDATE 1"), nil
}

func (d *outageDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	panic("not used by the clock")
}

func (d *outageDB) QueryRow(context.Context, string, ...any) pgx.Row {
	panic("not used by the clock")
}

func (d *outageDB) last() (time.Time, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.set) == 0 {
		return time.Time{}, 0
	}
	return d.set[len(d.set)-1], len(d.set)
}

func (d *outageDB) fail(for_ time.Duration) {
	d.mu.Lock()
	d.until = time.Now().Add(for_)
	d.mu.Unlock()
}

// An outage longer than the clock's patience leaves Err saying how long it
// tried; one shorter than its patience is ridden through, the database left
// at the clock's time. A run through a failover sets the patience to its own
// wait (chaos.Options.OutageWait): with the default, a synchronous cluster
// whose new primary waited 20 s for a standby ended the run.
func TestClockPatienceBoundsEachPush(t *testing.T) {
	start := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	db := &outageDB{}
	c := NewClock(start)
	if err := c.Follow(context.Background(), db); err != nil {
		t.Fatal(err)
	}

	c.SetPatience(200 * time.Millisecond)
	db.fail(time.Minute)
	began := time.Now()
	now := c.Advance(time.Second)
	took := time.Since(began)
	err := c.Err()
	if err == nil || !strings.Contains(err.Error(), "for 200ms") {
		t.Fatalf("an outage past the patience: Err %v; want one naming 200ms", err)
	}
	if took < 200*time.Millisecond || took > 10*time.Second {
		t.Errorf("Advance gave up after %s; want the patience (200ms), not less, nor much more", took)
	}
	if !now.Equal(start.Add(time.Second)) || !c.Now().Equal(now) {
		t.Errorf("the clock reads %s; want %s even when the database could not follow", c.Now(), start.Add(time.Second))
	}

	// An outage shorter than the patience: ridden through.
	c.SetPatience(10 * time.Second)
	db.fail(300 * time.Millisecond)
	now = c.Advance(time.Second)
	if err := c.Err(); err != nil {
		t.Fatalf("an outage of 300ms under a patience of 10s: %v", err)
	}
	if got, n := db.last(); !got.Equal(now) || n < 2 {
		t.Errorf("the database's clock: %s after %d writes; want %s", got, n, now)
	}
}
