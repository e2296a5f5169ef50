package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A pool cache keeps the pools of the banks its runs used last, as many as
// it was told, and closes the others with their connections once no run
// uses them: an audit's cache that kept every lent bank's pool held their
// idle connections to its end, and two exhaustive audits side by side ran
// PostgreSQL out of connections. A pool in use is never closed under its
// run, and the next run on a kept bank gets its open pool back.
func TestPoolCacheKeepsOnlyThePoolsUsedLast(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbs := pgtest.Banks(t)
	c := newPoolCache(2)
	defer c.close()
	cfg := Config{Clients: 1}
	var lent []*banks.Database
	pools := map[string]*pgxpool.Pool{}
	for range 3 { // three banks at once: three different ones
		db, err := dbs.NewBank(ctx, "pool-cache")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		p, err := c.get(ctx, db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		lent, pools[db.Name] = append(lent, db), p
	}
	c.put(lent[0]) // one idle, two in use: under the bound
	c.put(lent[1]) // two idle
	if err := pools[lent[0].Name].Ping(ctx); err != nil {
		t.Fatalf("with two idle pools and a bound of two, the first was closed: %v", err)
	}
	c.put(lent[2]) // three idle: the one used first goes
	if n := len(c.m); n != 2 {
		t.Errorf("%d pools kept, want 2", n)
	}
	if s := pools[lent[0].Name].Stat(); s.TotalConns() != 0 || pools[lent[0].Name].Ping(ctx) == nil {
		t.Errorf("the pool used first is still open, with %d connections", s.TotalConns())
	}
	for _, db := range lent[1:] {
		p, err := c.get(ctx, db, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if p != pools[db.Name] || p.Stat().TotalConns() == 0 {
			t.Errorf("bank %s: the next run got a new pool (or one with no connection open), not the kept one", db.Name)
		}
		c.put(db)
	}
}
