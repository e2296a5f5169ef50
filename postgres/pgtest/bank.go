package pgtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// NewBank gives the test its own fresh copy of the lesson's bank and a pool
// of up to maxConns real connections to it, closed (before the database is
// dropped) when the test ends.
func NewBank(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return NewBankWith(t, BankOptions{MaxConns: maxConns})
}

// BankOptions shape a test's bank.
type BankOptions struct {
	// MaxConns bounds the pool; 4 when zero.
	MaxConns int32
	// Accounts, when set, replace the lesson's three accounts (MixedAccounts
	// is the usual choice for a rule about owners or statuses).
	Accounts []bank.Account
	// Params are run-time parameters set on every connection of the pool,
	// e.g. deadlock_timeout.
	Params map[string]string
}

// MixedAccounts is a bank without the lesson's coincidences, for tests of
// rules about owners and statuses: no account id equals its owner's user id
// (account 2 exists, and belongs to user 4, not user 2), Ada (user 1) and
// Bola (user 2) own two accounts each, and a closed account with money in
// it sits beside a frozen one. An ownership check that compares the wrong
// column, or a status rule that forgets "closed", passes on the lesson's
// bank and fails here. ₦99,000 in all.
var MixedAccounts = []bank.Account{
	{ID: 2, OwnerID: 4, Holder: "Dayo Ojo", Status: "active", BalanceKobo: 100_000},
	{ID: 11, OwnerID: 1, Holder: "Ada Obi", Status: "active", BalanceKobo: 5_000_000},
	{ID: 12, OwnerID: 1, Holder: "Ada Savings", Status: "active", BalanceKobo: 2_000_000},
	{ID: 21, OwnerID: 2, Holder: "Bola Ade", Status: "active", BalanceKobo: 500_000},
	{ID: 22, OwnerID: 2, Holder: "Bola Old", Status: "closed", BalanceKobo: 300_000},
	{ID: 31, OwnerID: 3, Holder: "Chidi Eze", Status: "frozen", BalanceKobo: 2_000_000},
}

// MixedTotal is the money in MixedAccounts.
const MixedTotal = 9_900_000

// NewBankWith is NewBank shaped by o. A bank without Params is lent: one a
// finished test gave back is reset to the state of a fresh clone
// (banks.Recycled: the opening rows, every sequence at its start, every
// session DISCARDed) and lent again with its pool and connections, instead of
// a CREATE DATABASE, a DROP DATABASE and a new backend for each connection of
// every test. On this 2-core VM a new connection costs ~25 ms of CPU (fork and
// page faults, in the kernel), a reset 2-6 ms; the tests of api, bank, idem,
// outbox and probe make hundreds of banks. A pool still in use when its test
// ends is never lent again (it is closed and dropped), nor is one its test
// closed. Params change every session, so a bank with them is a fresh clone.
func NewBankWith(t testing.TB, o BankOptions) *pgxpool.Pool {
	t.Helper()
	if o.MaxConns <= 0 {
		o.MaxConns = 4
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pool *pgxpool.Pool
	if len(o.Params) == 0 {
		db, err := lender(t, o.MaxConns).NewBank(ctx, label(t.Name()))
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		t.Cleanup(db.Close)
		pool = db.Pool
	} else {
		db := NewDatabase(t, banks.Template)
		cfg, err := pgxpool.ParseConfig(db.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = o.MaxConns
		for k, v := range o.Params {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
		if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		// Registered after NewDatabase's cleanup, so it runs before the drop.
		t.Cleanup(pool.Close)
	}
	if o.Accounts != nil {
		if err := ReplaceAccounts(ctx, pool, o.Accounts); err != nil {
			t.Fatal(err)
		}
	}
	return pool
}

var (
	lendersMu sync.Mutex
	lenders   = map[int32]banks.Databases{}
	// closeLenders drop every lent bank; closeServer calls them before it
	// stops the server.
	closeLenders []func()
)

// Banks returns the test binary's lent banks as a maker: each NewBank is a
// bank another test (or run) used and gave back, reset to its opening
// state, with its pool's connections still open; Close gives it back. A
// run on a bank of its own cloned the template and forked a backend for
// each connection again.
func Banks(t testing.TB) banks.Databases {
	return lender(t, banks.PoolSize)
}

// lender is the recycler of the banks whose pools hold maxConns
// connections: a test that asked for 4 never gets a pool of 16.
func lender(t testing.TB, maxConns int32) banks.Databases {
	srv := Server(t)
	lendersMu.Lock()
	defer lendersMu.Unlock()
	if d, ok := lenders[maxConns]; ok {
		return d
	}
	d, closeFn := banks.Recycled(banks.OnServer(srv, banks.Options{MaxConns: maxConns, Fresh: true}))
	lenders[maxConns] = d
	closeLenders = append(closeLenders, closeFn)
	return d
}

// ReplaceAccounts empties the bank and opens accounts instead, in one
// transaction.
func ReplaceAccounts(ctx context.Context, db bank.DB, accounts []bank.Account) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM idempotency_keys; DELETE FROM transfers; DELETE FROM accounts"); err != nil {
			return fmt.Errorf("empty the bank: %w", err)
		}
		for _, a := range accounts {
			if _, err := tx.Exec(ctx,
				"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES ($1, $2, $3, $4, $5)",
				a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo); err != nil {
				return fmt.Errorf("open account %d: %w", a.ID, err)
			}
		}
		return nil
	})
}

// Deadlocks returns how many deadlocks PostgreSQL has detected in the
// database that cfg connects to (pg_stat_database.deadlocks). A backend
// reports its deadlocks when its transaction ends or, at the latest, when it
// exits; so Deadlocks first waits (until ctx ends) for every other backend
// of that database to exit: close the pool before calling it.
func Deadlocks(ctx context.Context, cfg *pgx.ConnConfig) (int64, error) {
	c, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return 0, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	for {
		var others int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			return 0, fmt.Errorf("count the backends still connected: %w", err)
		}
		if others == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for %d backend(s) of the test's database to exit, so that their deadlocks are counted: %w", others, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := c.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	var n int64
	err = c.QueryRow(ctx, "SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()").Scan(&n)
	return n, err
}

// CountedBanks is a maker that counts the banks it makes: a test of a
// recycler checks with it how many databases were cloned.
type CountedBanks struct {
	banks.Databases
	Made atomic.Int32
}

// NewBank counts the bank and makes it.
func (c *CountedBanks) NewBank(ctx context.Context, label string) (*banks.Database, error) {
	c.Made.Add(1)
	return c.Databases.NewBank(ctx, label)
}

// HasBalanceFloor reports whether the bank q reaches has the accounts
// table's CHECK (balance_kobo >= 0), which the no-balance-floor mistake's
// schema drops (bank.DropBalanceFloorSQL): whether the schema or only the
// code keeps balances at zero or more.
func HasBalanceFloor(ctx context.Context, q bank.Querier) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_constraint
		WHERE conrelid = 'accounts'::regclass AND conname = 'accounts_balance_kobo_check')`).Scan(&ok)
	return ok, err
}
