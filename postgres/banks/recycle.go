package banks

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Recycled makes fresh banks by resetting databases that earlier phases have
// finished with, instead of cloning and dropping one per phase, and keeps
// each database's pool, connections included. A clone costs a CREATE
// DATABASE (two checkpoints), its drop a DROP DATABASE, and each new
// connection a backend: measured here, 100–900 ms, 10–140 ms and 5–30 ms,
// against 2–6 ms for a reset. Each bank handed out is in the state of a
// fresh clone (see reset.go): the lesson's accounts, every other table
// empty, every sequence at its start, every CHECK constraint in place, the
// database's clock running, and connections without session state.
//
// A bank whose pool still has a connection in use when it is closed (a
// goroutine of its phase still at work) is never handed out again: it is
// closed and dropped as before, once that connection comes back.
//
// Recycled of a Databases that Recycled made is that same Databases, with a
// close that does nothing: a run that shares one recycler between its
// scenarios (scenario --all) keeps it when scenarios.ExecuteWith asks for one.
// close drops every database it made, or keeps them reset for a later run
// where the server keeps databases (Database.Keep); call it once nothing
// uses them.
func Recycled(dbs Databases) (recycled Databases, close func()) {
	if r, ok := dbs.(*recycler); ok {
		return r, func() {}
	}
	r := &recycler{dbs: dbs}
	return r, r.close
}

type recycler struct {
	dbs     Databases
	mu      sync.Mutex
	free    []*recycledBank
	all     []*recycledBank
	retired sync.WaitGroup
	opening *resetter // read from the first bank made
}

// recycledBank is one database and what it takes to reset it.
type recycledBank struct {
	db    *Database
	reset *resetter
}

func (r *recycler) NewBank(ctx context.Context, label string) (*Database, error) {
	for {
		r.mu.Lock()
		var b *recycledBank
		if n := len(r.free); n > 0 {
			b, r.free = r.free[n-1], r.free[:n-1]
		}
		r.mu.Unlock()
		if b == nil {
			break
		}
		if err := b.reset.reset(ctx, b.db.Pool); err != nil {
			if ctx.Err() != nil {
				r.put(b)
				return nil, ctx.Err()
			}
			// A bank that cannot be reset (its connections died with
			// the server, say) is dropped; the next one may do.
			r.retire(b)
			continue
		}
		return r.lend(b), nil
	}
	db, err := r.dbs.NewBank(ctx, label)
	if err != nil {
		return nil, err
	}
	rs, err := r.resetter(ctx, db.Pool)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("read the opening state of a new bank: %w", err)
	}
	b := &recycledBank{db: db, reset: rs}
	r.mu.Lock()
	r.all = append(r.all, b)
	r.mu.Unlock()
	return r.lend(b), nil
}

// resetter reads the opening state from the first fresh bank (through
// pool) and keeps it for the others: they are clones of the same template.
func (r *recycler) resetter(ctx context.Context, pool *pgxpool.Pool) (*resetter, error) {
	r.mu.Lock()
	rs := r.opening
	r.mu.Unlock()
	if rs != nil {
		return rs, nil
	}
	rs, err := newResetter(ctx, pool)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opening == nil {
		r.opening = rs
	}
	return r.opening, nil
}

// lend hands b out; its Close gives it back for the next phase.
func (r *recycler) lend(b *recycledBank) *Database {
	var once sync.Once
	return &Database{Pool: b.db.Pool, Name: b.db.Name, Close: func() {
		once.Do(func() {
			if inUse(b.db.Pool) {
				r.retire(b)
				return
			}
			r.put(b)
		})
	}}
}

// inUse reports whether a connection of pool is still out: something of the
// phase that used it still runs, and may write to the bank later.
func inUse(pool *pgxpool.Pool) bool { return pool.Stat().AcquiredConns() > 0 }

func (r *recycler) put(b *recycledBank) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.free = append(r.free, b)
}

// retire closes and drops b in the background (its pool's Close waits for
// the connection still out), and never hands it out again.
func (r *recycler) retire(b *recycledBank) {
	r.mu.Lock()
	for i, x := range r.all {
		if x == b {
			r.all = append(r.all[:i], r.all[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	r.retired.Add(1)
	go func() {
		defer r.retired.Done()
		b.db.Close()
	}()
}

// end keeps b for a later run, reset, where the server keeps databases
// (an embedded cluster), and drops it otherwise, or when it cannot be
// reset (a kept database is always clean).
func (b *recycledBank) end() {
	if b.db.Keep == nil || inUse(b.db.Pool) {
		b.db.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.reset.reset(ctx, b.db.Pool); err != nil {
		b.db.Close()
		return
	}
	b.db.Keep()
}

// retiredWait bounds how long close waits for retired banks, whose pools
// wait for a connection that a stuck goroutine holds.
const retiredWait = 30 * time.Second

func (r *recycler) close() {
	r.mu.Lock()
	all := r.all
	r.all, r.free = nil, nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.end()
		}()
	}
	wg.Wait()
	done := make(chan struct{})
	go func() {
		r.retired.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(retiredWait):
	}
}
