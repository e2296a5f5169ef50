package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/scenarios"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewBank gives the test its own fresh copy of the lesson's bank and a pool
// of up to maxConns real connections to it, closed (before the database is
// dropped) when the test ends.
func NewBank(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	db := NewDatabase(t, scenarios.BankTemplate)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after NewDatabase's cleanup, so it runs before the drop.
	t.Cleanup(pool.Close)
	return pool
}
