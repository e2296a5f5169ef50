package banks_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// A bank handed out again is, row for row and sequence for sequence, a
// fresh clone of the template, and its connections keep nothing of the
// phase before: no prepared statement, advisory lock, setting or temporary
// table.
func TestARecycledBankIsAFreshClone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Fresh: its bank is never kept for a later run in the cluster's slot,
	// which other runs share. Its phase drops a CHECK, and a reset that
	// failed to put it back (a plant of this test) would hand a bank
	// without it to the next run that takes a kept database.
	counted := &pgtest.CountedBanks{Databases: banks.OnServer(pgtest.Server(t), banks.Options{Fresh: true})}
	recycled, closeBanks := banks.Recycled(counted)
	defer closeBanks()

	used, err := recycled.NewBank(ctx, "recycled")
	if err != nil {
		t.Fatal(err)
	}
	name := used.Name
	dirty(ctx, t, used.Pool)
	used.Close()

	again, err := recycled.NewBank(ctx, "recycled")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.Name != name || counted.Made.Load() != 1 {
		t.Fatalf("the second bank is %s (%d clones made), want %s reused", again.Name, counted.Made.Load(), name)
	}

	// Every connection the pool kept: hold them all at once.
	var conns []*pgxpool.Conn
	for range 3 {
		c, err := again.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		var prepared, locks int
		var timeout string
		var temp bool
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_prepared_statements),
			(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
			current_setting('statement_timeout'), to_regclass('pg_temp.leftover') IS NOT NULL`).Scan(&prepared, &locks, &timeout, &temp); err != nil {
			t.Fatal(err)
		}
		// Our own query is prepared by now; the phase's are gone.
		if prepared > 1 || locks != 0 || timeout != "0" || temp {
			t.Errorf("connection %d kept the last phase's session: %d prepared statements, %d advisory locks, statement_timeout %s, temporary table %v",
				i+1, prepared, locks, timeout, temp)
		}
		// pgx forgot them too: the phase's query is prepared again.
		if err := c.QueryRow(ctx, dirtyQuery, 0).Scan(new(int)); err != nil {
			t.Errorf("connection %d: the last phase's query fails: %v", i+1, err)
		}
	}
	for _, c := range conns {
		c.Release()
	}

	// A clone, not a bank an earlier run kept (OnServer would take one).
	fresh, err := pgxpool.New(ctx, pgtest.NewDatabase(t, banks.Template).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	want, got := contents(ctx, t, fresh), contents(ctx, t, again.Pool)
	if got != want {
		t.Errorf("the recycled bank differs from a fresh clone\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(want, `"holder":"Ada Obi"`) || !strings.Contains(want, "sim_clock") ||
		!strings.Contains(want, "accounts.accounts_balance_kobo_check CHECK ((balance_kobo >= 0))") {
		t.Fatalf("a fresh clone should hold the lesson's accounts, the clock and the balance's CHECK: %s", want)
	}
}

// dirty does to a bank what a phase may do: rows in every table, sequences
// moved on, the database's clock stopped, the balance's CHECK dropped and a
// balance below zero (the no-balance-floor mistake's schema), and session
// state on three connections.
func dirty(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(ctx, `
		UPDATE accounts SET balance_kobo = balance_kobo - 1000000 WHERE id = 1;
		UPDATE accounts SET balance_kobo = balance_kobo + 1000000, status = 'frozen' WHERE id = 2;
		INSERT INTO accounts VALUES (9, 9, 'Dayo Ojo', 'active', 1);
		INSERT INTO transfers (from_account, to_account, amount_kobo, intent) VALUES (1, 2, 1000000, 'x'), (1, 2, 1, 'y');
		INSERT INTO idempotency_keys VALUES (1, 'k', 'h', 'completed', 'l', now(), 201, '{}', now());
		UPDATE sim_clock SET stopped_at = '2030-01-01T00:00:00Z';
		INSERT INTO outbox (kind, transfer_id, user_id, payload) VALUES ('sms', 1, 1, 'hi');
		INSERT INTO outbox_attempts (outbox_id, attempt, dispatcher, claim_token, claimed_at, lease_until) VALUES (1, 1, 'A', 't', now(), now());
		INSERT INTO processed_events (consumer, event_id) VALUES ('c', 'e');
		INSERT INTO notifications (consumer, event_id, transfer_id, account_id, text) VALUES ('c', 'e', 1, 2, 'hi');
		INSERT INTO orders VALUES (1, 'paid');
		ALTER TABLE accounts DROP CONSTRAINT accounts_balance_kobo_check;
		UPDATE accounts SET balance_kobo = -1 WHERE id = 3`); err != nil {
		t.Fatal(err)
	}
	var conns []*pgxpool.Conn
	for i := range 3 {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Exec(ctx, fmt.Sprintf(`PREPARE leftover%d AS SELECT 1;
			SELECT pg_advisory_lock(%d); SET statement_timeout = '12s';
			CREATE TEMP TABLE leftover (x int)`, i, 42+i)); err != nil {
			t.Fatal(err)
		}
		// And one of pgx's own prepared statements.
		if err := c.QueryRow(ctx, dirtyQuery, 0).Scan(new(int)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		c.Release()
	}
}

// dirtyQuery is a query a phase ran, which pgx prepared and cached.
const dirtyQuery = "SELECT count(*) FROM transfers WHERE amount_kobo > $1"

// contents is every table's rows, every sequence's position and every
// constraint, as text.
func contents(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT relname, relkind = 'S' FROM pg_class
		WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'S') ORDER BY relname`)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct {
		Name     string
		Sequence bool
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range rels {
		q := fmt.Sprintf("SELECT coalesce(json_agg(t ORDER BY t::text), '[]')::text FROM %s t", pgx.Identifier{r.Name}.Sanitize())
		if r.Sequence {
			q = fmt.Sprintf("SELECT last_value || ' ' || is_called FROM %s", pgx.Identifier{r.Name}.Sanitize())
		}
		var v string
		if err := pool.QueryRow(ctx, q).Scan(&v); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s: %s; ", r.Name, v)
	}
	var constraints string
	if err := pool.QueryRow(ctx, `SELECT string_agg(conrelid::regclass || '.' || conname || ' ' || pg_get_constraintdef(oid), ', ' ORDER BY conrelid::regclass::text, conname)
		FROM pg_constraint WHERE connamespace = 'public'::regnamespace`).Scan(&constraints); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "constraints: %s", constraints)
	return b.String()
}

// A bank whose pool still has a connection out when its phase closes it is
// never lent again (whatever holds the connection may still write), and it
// is dropped once the connection comes back.
func TestABankStillInUseIsNotLentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := pgtest.Server(t)
	recycled, closeBanks := banks.Recycled(banks.OnServer(srv, banks.Options{}))
	first, err := recycled.NewBank(ctx, "in-use")
	if err != nil {
		t.Fatal(err)
	}
	straggler, err := first.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	second, err := recycled.NewBank(ctx, "in-use")
	if err != nil {
		t.Fatal(err)
	}
	if second.Name == first.Name {
		t.Fatalf("bank %s was lent again while a connection of its pool was still in use", first.Name)
	}
	second.Close()
	straggler.Release()
	closeBanks()

	admin, err := pgx.Connect(ctx, srv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var left []string
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname = ANY($1)", []string{first.Name, second.Name})
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("databases left after close: %v", left)
	}
}
