package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var tpl = postgres.Template{
	Version: "pgtest-v1",
	Init: func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1), (2)")
		return err
	},
}

func TestNewDatabase(t *testing.T) {
	for _, name := range []string{"a", "b", "c"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.NewDatabase(t, tpl)
			ctx := context.Background()
			c, err := pgx.Connect(ctx, db.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
				t.Fatalf("count %d, %v", n, err)
			}
		})
	}
	t.Log(pgtest.Server(t).Describe())
}

// A bank a finished test gave back is lent to the next test that asks for
// a pool of the same size, reset to a fresh clone's state: the lesson's
// balances, no transfers or keys, the transfer ids starting again. A test
// that asked for another size gets another bank; one whose test closed its
// pool, or still used it, is never lent again.
func TestLentBanksAreFreshAndTheirSize(t *testing.T) {
	ctx := pgtest.Bounded(t, "the lent banks' test")
	const size = 3 // no other test of this binary asks for 3 or 5
	state := func(t *testing.T, pool *pgxpool.Pool) (db string, balances string, transfers int, nextID int64) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT current_database(),
			(SELECT string_agg(id || '=' || balance_kobo, ',' ORDER BY id) FROM accounts),
			(SELECT count(*) FROM transfers)`).Scan(&db, &balances, &transfers)
		if err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, "INSERT INTO transfers (from_account, to_account, amount_kobo) VALUES (1, 2, 1) RETURNING id").Scan(&nextID); err != nil {
			t.Fatal(err)
		}
		return
	}
	var firstDB, freshBalances string
	t.Run("dirty", func(t *testing.T) {
		pool := pgtest.NewBank(t, size)
		var transfers int
		var id int64
		firstDB, freshBalances, transfers, id = state(t, pool)
		if transfers != 0 || id != 1 {
			t.Fatalf("a new bank has %d transfers and gives id %d, want 0 and 1", transfers, id)
		}
		if _, err := pool.Exec(ctx, "UPDATE accounts SET balance_kobo = balance_kobo - 7 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("lent again, fresh", func(t *testing.T) {
		pool := pgtest.NewBank(t, size)
		db, balances, transfers, id := state(t, pool)
		if db != firstDB {
			t.Fatalf("got database %s, want %s lent again", db, firstDB)
		}
		if balances != freshBalances || transfers != 0 || id != 1 {
			t.Fatalf("lent again with balances %s, %d transfers, next id %d; want %s, 0, 1", balances, transfers, id, freshBalances)
		}
		if n := pool.Config().MaxConns; n != size {
			t.Fatalf("MaxConns %d, want %d", n, size)
		}
		pool.Close() // the test closes it: never lent again
	})
	t.Run("another size", func(t *testing.T) {
		pool := pgtest.NewBank(t, size+2)
		db, _, _, _ := state(t, pool)
		if db == firstDB || pool.Config().MaxConns != size+2 {
			t.Fatalf("a pool of %d got database %s (the pool of %d's is %s) with MaxConns %d", size+2, db, size, firstDB, pool.Config().MaxConns)
		}
	})
	t.Run("after a closed pool", func(t *testing.T) {
		pool := pgtest.NewBank(t, size)
		if db, _, _, _ := state(t, pool); db == firstDB {
			t.Fatalf("the bank whose pool its test closed was lent again")
		}
	})
}
