package idem_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func bounded(t testing.TB, what string) context.Context { return pgtest.Bounded(t, what) }

// t0 is the fixed clock of the store tests: 24 September 2026, 10:00 UTC.
var t0 = time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)

func at(seconds int) time.Time { return t0.Add(time.Duration(seconds) * time.Second) }

// newBank gives the test its own fresh copy of the lesson's bank.
func newBank(t testing.TB, maxConns int32) *pgxpool.Pool { return pgtest.NewBank(t, maxConns) }

func count(t testing.TB, db bank.Querier, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func transfers(t testing.TB, db bank.Querier) int {
	return count(t, db, "SELECT count(*) FROM transfers")
}

func keyRows(t testing.TB, db bank.Querier) int {
	return count(t, db, "SELECT count(*) FROM idempotency_keys")
}

func ledger(t testing.TB, db bank.DB) bank.Ledger {
	t.Helper()
	l, err := bank.ReadLedger(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func body(from, to, amount int64) []byte {
	return bank.TransferRequest{From: from, To: to, AmountKobo: amount}.Body()
}
