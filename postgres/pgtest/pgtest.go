// Package pgtest gives tests of other packages fresh PostgreSQL databases.
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
//
//	func TestX(t *testing.T) {
//		db := pgtest.NewDatabase(t, bank.Template)
//		conn, _ := pgx.Connect(ctx, db.URL)
//		...
//	}
//
// One server per test binary is started lazily by the first NewDatabase
// (DATABASE_URL is honoured), so binaries or -run selections that need no
// database pay nothing. If PostgreSQL cannot be started, tests fail with
// the reason and the fix; they are never skipped.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
)

var (
	mu      sync.Mutex
	ran     bool
	srv     *postgres.Server
	srvErr  error
	started bool
)

// Run is the body of TestMain: it lets the binary act as the PostgreSQL
// supervisor when re-executed, runs the tests, and stops the server (also
// if a test panics; a crash or SIGKILL is handled by the supervisor).
// before runs after the tests, before the lent banks are dropped: what
// still holds connections to them closes there.
func Run(m *testing.M, before ...func()) int {
	postgres.MaybeSupervise()
	mu.Lock()
	ran = true
	mu.Unlock()
	defer closeServer()
	defer func() {
		for _, f := range before {
			f()
		}
	}()
	return m.Run()
}

func closeServer() {
	lendersMu.Lock()
	for _, c := range closeLenders {
		c()
	}
	closeLenders, lenders = nil, map[int32]banks.Databases{}
	lendersMu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if srv != nil {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: closing PostgreSQL:", err)
		}
		srv = nil
	}
}

// Server returns the test binary's server, starting it on first use. It
// fails t if PostgreSQL is unavailable.
func Server(t testing.TB) *postgres.Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !ran {
		t.Fatal("pgtest: call os.Exit(pgtest.Run(m)) from TestMain before using pgtest")
	}
	if !started {
		started = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		opts := postgres.Options{URL: os.Getenv("DATABASE_URL")}
		if os.Getenv("BANK_SIM_PG_LOG") != "" {
			opts.Log = os.Stderr
		}
		srv, srvErr = postgres.Start(ctx, opts)
	}
	if srvErr != nil {
		t.Fatalf("pgtest: %v", srvErr)
	}
	return srv
}

// NewDatabase clones a fresh database from tpl for this test and drops it
// when the test ends.
func NewDatabase(t testing.TB, tpl postgres.Template) *postgres.Database {
	t.Helper()
	s := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := s.CreateDatabase(ctx, tpl, label(t.Name()))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return db
}

func label(name string) string {
	name = strings.ToLower(name)
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	return name
}

// Bounded is a context for one step of a test that ends, with a sentence
// saying what never came, if the step has not finished within 30 s: a
// mistake that makes work wait forever (for a connection, a row lock, a
// key) fails the test instead of hanging the suite.
func Bounded(t testing.TB, what string) context.Context {
	ctx, cancel := context.WithTimeoutCause(context.Background(), 30*time.Second, fmt.Errorf("%s did not finish within 30 s", what))
	t.Cleanup(cancel)
	return ctx
}
