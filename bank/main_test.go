package bank_test

import (
	"context"
	"os"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func bounded(t testing.TB, what string) context.Context { return pgtest.Bounded(t, what) }

// newBank gives the test its own fresh copy of the lesson's bank.
func newBank(t testing.TB, maxConns int32) *pgxpool.Pool { return pgtest.NewBank(t, maxConns) }

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
