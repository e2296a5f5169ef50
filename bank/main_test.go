package bank_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// bankTemplate is the lesson's bank. It is built here rather than taken from
// package scenarios, which imports bank.
var bankTemplate = postgres.Template{
	Version: bank.SchemaVersion(),
	Init:    func(ctx context.Context, conn *pgx.Conn) error { return bank.Setup(ctx, conn) },
}

// newBank gives the test its own fresh copy of the lesson's bank and a pool
// of up to maxConns real connections to it.
func newBank(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	db := pgtest.NewDatabase(t, bankTemplate)
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

func ledger(t testing.TB, db bank.DB) bank.Ledger {
	t.Helper()
	l, err := bank.ReadLedger(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func balance(t testing.TB, l bank.Ledger, id int64) int64 {
	t.Helper()
	b, ok := l.Balance(id)
	if !ok {
		t.Fatalf("account %d missing from the ledger", id)
	}
	return b
}

// openingTotal is ₦75,000: the money in the lesson's bank.
const openingTotal = 7_500_000

// assertAllInvariants fails t with every broken invariant's detail.
func assertAllInvariants(t testing.TB, l bank.Ledger, told []bank.Told) {
	t.Helper()
	for _, c := range bank.CheckInvariants(bank.LessonAccounts, l, told) {
		if !c.OK {
			t.Errorf("invariant %q broken: %s", c.Name, c.Detail)
		}
	}
}
