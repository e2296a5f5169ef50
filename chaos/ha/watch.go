package ha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5"
)

// WatchEvery is how often a Watcher asks which server is primary: the
// precision of a primary change's times.
var WatchEvery = 100 * time.Millisecond

// Watcher follows, through a URL (several hosts with
// target_session_attrs=read-write, or one address in front of them),
// which server takes writes: it keeps
// one connection, asks it every WatchEvery whether it is still a
// primary and on which timeline, and reconnects (to whichever host
// takes writes now) when it breaks or is not. Another host, or the same
// address on another timeline (a promotion behind a virtual IP), is a
// change of primary. It needs no privilege: the timeline is read from the
// name of the current WAL file.
type Watcher struct {
	url string

	mu       sync.Mutex
	conn     *pgx.Conn
	cur      serverID
	first    serverID
	lastSeen time.Time
	lost     time.Time // the first failed poll since lastSeen; zero while it answers
	changes  []watchedChange
	changed  chan struct{}
	lastErr  error

	cancel context.CancelFunc
	done   chan struct{}
}

type serverID struct {
	host     string
	timeline int
}

type watchedChange struct {
	from, to             serverID
	lastSeen, lost, seen time.Time
}

// Watch starts a Watcher on url, having found the primary once: an error
// says that no server of url takes writes now.
func Watch(ctx context.Context, url string) (*Watcher, error) {
	w := &Watcher{url: url, changed: make(chan struct{}), done: make(chan struct{})}
	id, err := w.poll(ctx)
	if err != nil {
		return nil, fmt.Errorf("finding the primary to watch: %w", err)
	}
	w.cur, w.first, w.lastSeen = id, id, time.Now()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	go w.loop(wctx)
	return w, nil
}

func (w *Watcher) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(WatchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		id, err := w.poll(ctx)
		now := time.Now()
		w.mu.Lock()
		switch {
		case err != nil:
			w.lastErr = err
			if w.lost.IsZero() {
				w.lost = now
			}
		case id != w.cur:
			lost := w.lost
			if lost.IsZero() {
				lost = now // it answered last time, and another answers now
			}
			w.changes = append(w.changes, watchedChange{from: w.cur, to: id, lastSeen: w.lastSeen, lost: lost, seen: now})
			if len(w.changes) == 1 {
				close(w.changed)
			}
			w.cur, w.lastSeen, w.lost = id, now, time.Time{}
		default:
			w.lastSeen, w.lost = now, time.Time{}
		}
		w.mu.Unlock()
	}
}

// poll asks the watched connection (a new one if it has none) who it is.
// A server that is in recovery is not the primary: its connection is
// dropped, and the next poll connects afresh.
func (w *Watcher) poll(ctx context.Context) (serverID, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if w.conn == nil || w.conn.IsClosed() {
		cfg, err := pgx.ParseConfig(w.url)
		if err != nil {
			return serverID{}, err
		}
		cfg.RuntimeParams["application_name"] = "bank-sim primary watcher"
		if w.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			w.conn = nil
			return serverID{}, err
		}
	}
	var recovering bool
	var wal string
	err := w.conn.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		CASE WHEN pg_is_in_recovery() THEN '' ELSE pg_walfile_name(pg_current_wal_lsn()) END`).Scan(&recovering, &wal)
	if err == nil && recovering {
		err = errors.New("the server is in recovery (a standby)")
	}
	if err != nil {
		w.conn.Close(context.WithoutCancel(ctx))
		w.conn = nil
		return serverID{}, err
	}
	// A WAL file's name starts with its timeline, 8 hex digits.
	tl, _ := strconv.ParseInt(wal[:min(8, len(wal))], 16, 64)
	return serverID{host: postgres.ConnectedHost(ctx, w.conn), timeline: int(tl)}, nil
}

// First is the primary the watcher found as it started.
func (w *Watcher) First() chaos.PrimaryWatch {
	return chaos.PrimaryWatch{Host: w.first.host, Timeline: w.first.timeline, EveryMs: WatchEvery.Milliseconds()}
}

// Changed is closed once the first change of primary has been seen.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// FirstLost is when the old primary of the first change of primary was
// lost (its first failed poll, or the poll another answered), once that
// change has been seen.
func (w *Watcher) FirstLost() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.changes) == 0 {
		return time.Time{}, false
	}
	return w.changes[0].lost, true
}

// WaitChange waits, at most timeout, for a change of primary.
func (w *Watcher) WaitChange(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.changed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		w.mu.Lock()
		defer w.mu.Unlock()
		why := fmt.Sprintf("the primary is still %s", w.cur.host)
		if !w.lost.IsZero() {
			why = fmt.Sprintf("no server has taken writes since %s ago (%v)", time.Since(w.lost).Round(time.Millisecond), w.lastErr)
		}
		return fmt.Errorf("no change of primary within %s: %s", timeout, why)
	}
}

// Stop ends the watch and returns the changes it saw, their times as
// offsets from start, each with cause.
func (w *Watcher) Stop(start time.Time, cause func(seenNs int64) string) []chaos.PrimaryChange {
	w.cancel()
	<-w.done
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		w.conn.Close(ctx)
		cancel()
	}
	var out []chaos.PrimaryChange
	for _, c := range w.changes {
		seen := c.seen.Sub(start).Nanoseconds()
		out = append(out, chaos.PrimaryChange{Cause: cause(seen), From: c.from.host, To: c.to.host, FromTimeline: c.from.timeline, ToTimeline: c.to.timeline,
			LastSeenNs: c.lastSeen.Sub(start).Nanoseconds(), LostNs: c.lost.Sub(start).Nanoseconds(), SeenNs: seen})
	}
	return out
}
