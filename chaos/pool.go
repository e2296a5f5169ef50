package chaos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool opens a pool for a run of clients (Config's default when zero) on the
// database that base reaches: two connections per client (a duplicate's
// second copy, a late request, a staged deadlock's other transaction) plus
// room for the auditor, the wait policy's polls, and the side effects'
// dispatchers and consumer. Starved of connections,
// a handler cannot even release a key it failed on. It also shortens
// PostgreSQL's deadlock_timeout (1 s by default): a transfer with the
// no-row-lock bug deadlocks often, and each deadlock would otherwise stall
// its clients for a second; the deadlock fault relies on it too.
func Pool(ctx context.Context, base *pgxpool.Pool, clients int) (*pgxpool.Pool, error) {
	return pool(ctx, base, clients, 2*int32(clients)+10, false)
}

// PoolFor opens the pool that a run of cfg needs. A deterministic run's
// tasks keep their connections while they are parked mid-transaction, and
// one that found every connection taken would wait for a task that cannot
// move: so its pool is larger, and the run fails rather than waits when
// even that is not enough.
func PoolFor(ctx context.Context, base *pgxpool.Pool, cfg Config) (*pgxpool.Pool, error) {
	cfg = cfg.WithDefaults()
	p, err := pool(ctx, base, cfg.Clients, poolConns(cfg), cfg.Deterministic)
	if err != nil || !cfg.Deterministic {
		return p, err
	}
	if err := warm(ctx, p, warmConns(cfg)); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// warmConns is how many connections PoolFor opens before a deterministic
// run: about as many as its tasks use at once (measured: 5-10 at 4
// clients, 13 at 8, 21-22 at 16).
func warmConns(cfg Config) int32 {
	return min(int32(cfg.Clients)+6, poolConns(cfg))
}

// warm opens n connections of p side by side, and leaves them idle in p.
// A deterministic run has one task at a time, so a connection it opens
// itself costs the whole run that connection's start: PostgreSQL forks a
// backend, which loads the new database's catalogue, while every task
// waits. Measured at load 15: a 40-intent run at 16 clients took 17.6 s on
// a fresh pool and 4.0 s on one whose connections were open; a 1-intent
// run 3.2 s against 0.18 s.
func warm(ctx context.Context, p *pgxpool.Pool, n int32) error {
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns[i], errs[i] = p.Acquire(ctx)
		}()
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			c.Release()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("open the run's %d connections: %w", n, err)
	}
	return nil
}

// poolConns is the size of the pool PoolFor opens for cfg.
func poolConns(cfg Config) int32 {
	cfg = cfg.WithDefaults()
	if cfg.Deterministic {
		return 4*int32(cfg.Clients) + 12
	}
	return 2*int32(cfg.Clients) + 10
}

func pool(ctx context.Context, base *pgxpool.Pool, clients int, conns int32, det bool) (*pgxpool.Pool, error) {
	if clients <= 0 {
		clients = Config{}.WithDefaults().Clients
		conns = 2*int32(clients) + 10
	}
	cfg := base.Config()
	cfg.MaxConns = conns
	cfg.MinConns = 0
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "20ms"
	if det {
		// Set as the session starts, not by a statement of its own: see
		// schedDB.acquire.
		cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = detDeadlockTimeout
		// A task may leave its connection idle for a second of real time
		// while others run; a ping then would be a round trip per acquire.
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open a pool for %d clients: %w", clients, err)
	}
	return pool, nil
}

// poolCache keeps, for each recycled bank of a shrink or a campaign, the
// pool its last run used, so that the next run on that bank finds its
// connections open: a deterministic run's fixed cost was mostly PostgreSQL
// starting a backend for each connection it opened (a 2-intent run at 8
// clients: about 0.7 s, most of it in the kernel). A bank is used by one
// run at a time, and so is its pool. close must come before the banks are
// dropped.
//
// It keeps at most keep pools that no run uses, the ones used last: as
// many as its runs go at once. Banks are lent from a recycler another
// caller may share (the tests' one), so a cache of every bank its runs
// ever met held each of those pools' idle connections to the end: an
// exhaustive audit beside another one reached PostgreSQL's 200 connections
// (too many clients already).
type poolCache struct {
	mu   sync.Mutex
	m    map[string]*cachedPool
	keep int
	tick uint64
}

type cachedPool struct {
	p    *pgxpool.Pool
	busy bool   // a run on its bank is using it
	used uint64 // when that run ended, in the cache's ticks
}

// newPoolCache keeps at most keep idle pools (at least one).
func newPoolCache(keep int) *poolCache {
	return &poolCache{m: map[string]*cachedPool{}, keep: max(keep, 1)}
}

// get returns db's pool for a run of cfg: the last one, when it is a pool
// of the same kind with enough connections. The run hands it back with put
// (or drop).
func (c *poolCache) get(ctx context.Context, db *banks.Database, cfg Config) (*pgxpool.Pool, error) {
	c.mu.Lock()
	e := c.m[db.Name]
	if e != nil && e.p.Config().MaxConns >= poolConns(cfg) && isDetPool(e.p) == cfg.Deterministic {
		e.busy = true
		c.mu.Unlock()
		return e.p, nil
	}
	delete(c.m, db.Name)
	c.mu.Unlock()
	if e != nil {
		e.p.Close()
	}
	p, err := PoolFor(ctx, db.Pool, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.m[db.Name] = &cachedPool{p: p, busy: true}
	c.mu.Unlock()
	return p, nil
}

// put hands db's pool back after a run, and closes the pools no run uses
// beyond the keep used last.
func (c *poolCache) put(db *banks.Database) {
	c.mu.Lock()
	if e := c.m[db.Name]; e != nil {
		c.tick++
		e.busy, e.used = false, c.tick
	}
	var idle []string
	for name, e := range c.m {
		if !e.busy {
			idle = append(idle, name)
		}
	}
	slices.SortFunc(idle, func(a, b string) int { return cmp.Compare(c.m[a].used, c.m[b].used) })
	var closing []*pgxpool.Pool
	for _, name := range idle[:max(len(idle)-c.keep, 0)] {
		closing = append(closing, c.m[name].p)
		delete(c.m, name)
	}
	c.mu.Unlock()
	for _, p := range closing {
		p.Close()
	}
}

// drop closes db's pool and forgets it.
func (c *poolCache) drop(db *banks.Database) {
	c.mu.Lock()
	e := c.m[db.Name]
	delete(c.m, db.Name)
	c.mu.Unlock()
	if e != nil {
		e.p.Close()
	}
}

// close closes every pool.
func (c *poolCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, e := range c.m {
		e.p.Close()
		delete(c.m, name)
	}
}

func isDetPool(p *pgxpool.Pool) bool {
	return p.Config().ConnConfig.RuntimeParams["deadlock_timeout"] == detDeadlockTimeout
}
