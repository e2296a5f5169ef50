package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
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
