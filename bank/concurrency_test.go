package bank_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestCrossingTransfersDoNotDeadlock runs A→B and B→A transfers at once on a
// real pool. Transfer locks both rows in id order, so two crossing transfers
// queue instead of each holding the row the other needs: PostgreSQL must
// detect no deadlock at all. That is counted twice: as it happens (InTx's
// retry hook, which stops the test at the first one instead of letting
// retries run out), and in pg_stat_database.deadlocks before and after.
// deadlock_timeout is 10 ms on these connections, so a transfer that takes
// its locks in request order fails in a fraction of a second, not after
// minutes of one-second deadlock checks.
func TestCrossingTransfersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	for _, impl := range transferImpls {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			crossingTransfers(t, impl.run)
		})
	}
}

func crossingTransfers(t *testing.T, transfer transferFunc) {
	const (
		workers   = 8
		perWorker = 25
		amount    = 1_000 // ₦10
	)
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{MaxConns: workers + 2, Params: map[string]string{"deadlock_timeout": "10ms"}})
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Minute,
		errors.New("the crossing transfers did not finish within a minute"))
	defer cancel()
	before, err := pgtest.Deadlocks(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}

	// The first deadlock ends the test: every worker stops at once.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var deadlocks atomic.Int64
	ctx = bank.WithTxRetry(ctx, func(err error) {
		deadlocks.Add(1)
		stop(fmt.Errorf("PostgreSQL aborted a crossing transfer: %w", err))
	})

	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker)
	var mu sync.Mutex
	var told []bank.Told
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Even workers are Ada paying Bola, odd ones Bola paying Ada.
			userID, req := int64(1), bank.TransferRequest{From: 1, To: 2, AmountKobo: amount}
			if w%2 == 1 {
				userID, req = 2, bank.TransferRequest{From: 2, To: 1, AmountKobo: amount}
			}
			<-start
			for i := range perWorker {
				if ctx.Err() != nil {
					return
				}
				intent := fmt.Sprintf("w%d-%d", w, i)
				ictx := bank.WithIntent(ctx, intent)
				resp, err := transfer(ictx, pool, userID, req)
				if err != nil {
					errs <- fmt.Errorf("%s: %w", intent, err)
					continue
				}
				mu.Lock()
				told = append(told, bank.Told{Intent: intent, UserID: userID, Request: req, Response: resp})
				mu.Unlock()
				if resp.Status != 201 {
					errs <- fmt.Errorf("%s: %s, want 201", intent, resp.Summary())
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	if cause := context.Cause(ctx); cause != nil {
		t.Fatalf("%v (%d deadlock(s) seen; locks must be taken in id order, not in request order)", cause, deadlocks.Load())
	}
	for err := range errs {
		t.Error(err)
	}

	l := ledger(t, pool)
	pool.Close()
	after, err := pgtest.Deadlocks(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("pg_stat_database.deadlocks went from %d to %d; crossing transfers must never deadlock", before, after)
	}
	if got := len(l.Transfers); got != workers*perWorker {
		t.Errorf("%d transfers, want %d", got, workers*perWorker)
	}
	if got := l.Total(); got != openingTotal {
		t.Errorf("total %s, want ₦75,000", bank.Naira(got))
	}
	// As many transfers went each way, so both balances are back where they began.
	if a, b := balance(t, l, 1), balance(t, l, 2); a != 5_000_000 || b != 500_000 {
		t.Errorf("Ada %s, Bola %s; want ₦50,000 and ₦5,000", bank.Naira(a), bank.Naira(b))
	}
	assertAllInvariants(t, l, told)
}

type transferFunc func(ctx context.Context, db bank.DB, userID int64, req bank.TransferRequest) (bank.Response, error)

// withFlaws is the statement-at-a-time transfer with flaws, in a
// transaction of its own.
func withFlaws(flaws bank.Flaws) transferFunc {
	return func(ctx context.Context, db bank.DB, userID int64, req bank.TransferRequest) (bank.Response, error) {
		var resp bank.Response
		err := bank.InTx(ctx, db, func(tx pgx.Tx) error {
			var err error
			resp, err = bank.TransferWith(ctx, tx, userID, req, flaws)
			return err
		})
		return resp, err
	}
}

// drain runs n transfers of amount from Ada to Bola at the same moment, each
// in its own transaction on the pool, and returns how many were told 201.
func drain(t *testing.T, pool *pgxpool.Pool, n int, amount int64, transfer transferFunc) (created int, told []bank.Told) {
	t.Helper()
	ctx := bounded(t, fmt.Sprintf("%d concurrent transfers of %s from one account", n, bank.Naira(amount)))
	req := bank.TransferRequest{From: 1, To: 2, AmountKobo: amount}
	// Every goroutine holds its connection before the start, so none waits
	// for the pool while the others race.
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Release()
			intent := fmt.Sprintf("tap-%d", i)
			<-start
			resp, err := transfer(bank.WithIntent(ctx, intent), c.Conn(), 1, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s: %v (%v)", intent, err, context.Cause(ctx))
				return
			}
			told = append(told, bank.Told{Intent: intent, UserID: 1, Request: req, Response: resp})
			switch {
			case resp.Status == 201:
				created++
			case resp.Code() != bank.CodeInsufficientFunds:
				t.Errorf("%s: %s, want 201 or 422 insufficient_funds", intent, resp.Summary())
			}
		}()
	}
	close(start)
	wg.Wait()
	return created, told
}

// TestConcurrentTransfersFromOneAccount: 16 taps of ₦10,000 from Ada's
// ₦50,000 at once. Whenever the balance check and the debit are one
// conditional UPDATE, with or without row locks, exactly five go through and
// the total is conserved.
func TestConcurrentTransfersFromOneAccount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		transfer transferFunc
	}{
		{"correct transfer", withFlaws(bank.Flaws{})},
		{"correct transfer, pipelined", bank.PipelinedTransfer},
		{"conditional debit without row locks", withFlaws(bank.Flaws{NoRowLock: true})},
		{"conditional debit, sender row locked only", withFlaws(bank.Flaws{SenderLockOnly: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n = 16
			pool := newBank(t, n+2)
			created, told := drain(t, pool, n, 1_000_000, tt.transfer)
			if created != 5 {
				t.Errorf("%d transfers succeeded, want exactly 5 (₦50,000 / ₦10,000)", created)
			}
			l := ledger(t, pool)
			if a, b := balance(t, l, 1), balance(t, l, 2); a != 0 || b != 5_500_000 {
				t.Errorf("Ada %s, Bola %s; want ₦0 and ₦55,000", bank.Naira(a), bank.Naira(b))
			}
			if len(l.Transfers) != 5 {
				t.Errorf("%d transfer rows, want 5", len(l.Transfers))
			}
			assertAllInvariants(t, l, told)
		})
	}
}

// TestReadCompareWriteLosesUpdates is the gap the lesson warns about: with
// the balance read before the row lock, compared in Go and written back as an
// absolute value, concurrent transfers overwrite each other's debits
// while every credit lands. Money appears from nowhere; the CHECK constraint
// cannot see it, because no balance goes negative.
//
// The race is real, not staged: 16 goroutines holding their own connections
// start together. It showed in 20 of 20 trial rounds; to keep a scheduling
// fluke from failing the build, up to three fresh banks are tried, and the
// test fails if none of them shows the flaw.
func TestReadCompareWriteLosesUpdates(t *testing.T) {
	t.Parallel()
	const n = 16
	flaws := bank.Flaws{ReadCompareWrite: true}
	for round := 1; round <= 3; round++ {
		pool := newBank(t, n+2)
		created, told := drain(t, pool, n, 1_000_000, withFlaws(flaws))
		l := ledger(t, pool)
		pool.Close()
		if l.Total() == openingTotal {
			t.Logf("round %d: no lost update this time (%d succeeded, %s)", round, created, l.Line())
			continue
		}
		t.Logf("round %d: %d of %d transfers succeeded: %s", round, created, n, l.Line())
		if l.Total() < openingTotal {
			t.Errorf("total %s fell; lost debits should create money, not destroy it", bank.Naira(l.Total()))
		}
		failed := map[string]bool{}
		for _, c := range bank.CheckInvariants(bank.LessonAccounts, l, told) {
			if !c.OK {
				failed[c.Name] = true
			}
		}
		for _, name := range []string{bank.InvTotal, bank.InvLedger} {
			if !failed[name] {
				t.Errorf("invariant %q did not notice the lost update", name)
			}
		}
		if failed[bank.InvNegative] {
			t.Errorf("a balance went negative despite the CHECK constraint")
		}
		return
	}
	t.Fatal("read-compare-write without a row lock conserved the total in three rounds of 16 concurrent transfers")
}
