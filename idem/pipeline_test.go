package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// The correct handler's transfer is pipelined: in one round trip after the
// claim (the locking read, the guard, the writes, the key's completion and
// COMMIT together), or in two when a rule refuses or a hook waits between
// the checks and the writes (one round trip locks the accounts, the next
// carries the rest). These tests pin what must not change for that.

// TestPipelinedTakeoverIsFenced lets the key's lock expire between the two
// round trips, after the checks and before the writes, and has a retry on
// another server take the key over right then. The first server's writes,
// its stored answer and its COMMIT are already in one round trip when it
// learns that the key is no longer its own: the fenced completion must fail
// and take the transfer down with it (ErrLostLock), so that only the
// retry's transfer happens and its answer is the one the key keeps. With
// the no-fencing mistake, the same takeover moves the money twice: the
// test's fault really fires. A refusal is fenced the same way.
//
// The same takeover happens again in the moment the one-round-trip transfer
// has: after the slow server's claim, before its one round trip, with the
// retry's request answered in between. The slow server's round trip then
// finds the key completed by another: its completion fails and its COMMIT
// is skipped; a refusal, which goes on to two round trips, too.
func TestPipelinedTakeoverIsFenced(t *testing.T) {
	t.Parallel()
	type test struct {
		name      string
		noFencing bool
		amount    int64
		status    int // the retry's answer
		transfers int
		oneTrip   bool // the takeover after the claim, not between the checks and the writes
	}
	var tests []test
	for _, oneTrip := range []bool{false, true} {
		tests = append(tests,
			test{"correct", false, 1_000_000, 201, 1, oneTrip},
			test{"no-fencing", true, 1_000_000, 201, 2, oneTrip},
			test{"correct, a refusal", false, 6_000_000, 422, 0, oneTrip})
	}
	for _, tt := range tests {
		name := tt.name + ", between the checks and the writes"
		if tt.oneTrip {
			name = tt.name + ", before the one round trip"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 4)
			setClock(t, pool, t0)
			s := &idem.Store{Flaws: idem.Flaws{NoFencing: tt.noFencing}}
			slow, retry := &idem.Handler{DB: pool, Store: s}, &idem.Handler{DB: pool, Store: s}
			req := idem.Request{UserID: 1, Key: key, Body: body(1, 2, tt.amount)}

			var retryResp bank.Response
			var retryErr error
			done := make(chan struct{})
			took := make(chan idem.Claim, 1)
			between := func() {
				// The slow server has locked both accounts and checked them;
				// its lock expires and the retry takes the key over. The
				// retry's transfer then waits for the accounts' rows.
				setClock(t, pool, t0.Add(idem.DefaultLockTTL+time.Second))
				rctx := idem.WithHooks(bounded(t, "the retry"), idem.Hooks{AfterClaim: func(_ context.Context, c idem.Claim) { took <- c }})
				go func() {
					defer close(done)
					retryResp, retryErr = retry.Handle(rctx, req)
				}()
				select {
				case c := <-took:
					if !c.TookOver {
						t.Errorf("the retry claimed the key without a takeover: %+v", c)
					}
				case <-done:
					t.Errorf("the retry ended without claiming the key: %s %v", retryResp.Summary(), retryErr)
				case <-time.After(10 * time.Second):
					t.Error("the retry had not taken the key over after 10 s")
				}
				if !tt.oneTrip {
					return
				}
				// Nothing is locked yet: the retry's request runs to its end.
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Error("the retry had not answered after 10 s")
				}
			}
			var once sync.Once
			ctx := bounded(t, "the slow server's request")
			if tt.oneTrip {
				ctx = idem.WithHooks(ctx, idem.Hooks{AfterClaim: func(context.Context, idem.Claim) { once.Do(between) }})
			} else {
				ctx = bank.WithAfterChecks(ctx, func() { once.Do(between) })
			}
			slowResp, slowErr := slow.Handle(ctx, req)
			<-done

			if retryErr != nil || retryResp.Status != tt.status || retryResp.Replayed {
				t.Fatalf("the retry: %s %v, want a fresh %d", retryResp.Summary(), retryErr, tt.status)
			}
			if tt.noFencing {
				if slowErr != nil || slowResp.Status != 201 {
					t.Errorf("the slow server without fencing: %s %v, want its own 201", slowResp.Summary(), slowErr)
				}
			} else if !errors.Is(slowErr, idem.ErrLostLock) {
				t.Errorf("the slow server: %s %v, want ErrLostLock", slowResp.Summary(), slowErr)
			}
			if n := transfers(t, pool); n != tt.transfers {
				t.Errorf("%d transfers, want %d", n, tt.transfers)
			}
			if tt.noFencing {
				return
			}
			moved := int64(tt.transfers) * tt.amount
			l := ledger(t, pool)
			ada, _ := l.Balance(1)
			bola, _ := l.Balance(2)
			if ada != 5_000_000-moved || bola != 500_000+moved {
				t.Errorf("Ada %s, Bola %s: want %s moved once", bank.Naira(ada), bank.Naira(bola), bank.Naira(moved))
			}
			var status string
			var stored []byte
			if err := pool.QueryRow(context.Background(), "SELECT status, response_body FROM idempotency_keys WHERE user_id = 1 AND key = $1", key).
				Scan(&status, &stored); err != nil {
				t.Fatal(err)
			}
			if status != "completed" || string(stored) != string(retryResp.Body) {
				t.Errorf("key %s with %s, want completed with the retry's answer %s", status, stored, retryResp.Body)
			}
		})
	}
}

// TestPipelinedDeadlockRunsAgain stages a real deadlock in the second round
// trip, as chaos's deadlock fault does: between the checks and the writes,
// another transaction locks the key's row and asks for the sender's, which
// the transfer holds. The transfer's completion then waits for the key's
// row, PostgreSQL aborts it (40P01), and the whole pipelined transaction
// must run again, from the locking read, and succeed once.
func TestPipelinedDeadlockRunsAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{MaxConns: 4, Params: map[string]string{"deadlock_timeout": "20ms"}})
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	var retries atomic.Int64
	var other sync.WaitGroup
	var once sync.Once
	ctx := bounded(t, "a transfer caught in a deadlock")
	interfere := func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		var pid int32
		if _, err := tx.Exec(ctx, "SET LOCAL deadlock_timeout = '10s'"); err != nil {
			t.Error(err)
		}
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Error(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM idempotency_keys WHERE key = $1 FOR UPDATE", key); err != nil {
			t.Error(err)
		}
		other.Add(1)
		go func() {
			defer other.Done()
			_, _ = tx.Exec(ctx, "SELECT 1 FROM accounts WHERE id = 1 FOR UPDATE")
			_ = tx.Rollback(context.Background())
		}()
		for {
			var waiting bool
			err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')", pid).Scan(&waiting)
			if err != nil || waiting {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	ctx = bank.WithAfterChecks(ctx, func() { once.Do(interfere) })
	ctx = bank.WithTxRetry(ctx, func(err error) {
		retries.Add(1)
		if !bank.Retryable(err) {
			t.Errorf("ran again after %v", err)
		}
	})
	resp, err := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)})
	other.Wait()
	if err != nil || resp.Status != 201 {
		t.Fatalf("got %s %v, want 201", resp.Summary(), err)
	}
	if retries.Load() == 0 {
		t.Error("the transfer never ran again: the staged deadlock did not happen")
	}
	if n := transfers(t, pool); n != 1 {
		t.Errorf("%d transfers, want 1", n)
	}
	replay := handle(t, h, 1, key, body(1, 2, 1_000_000))
	if !replay.Replayed || string(replay.Body) != string(resp.Body) {
		t.Errorf("replay %s %s, want the first answer %s", replay.Summary(), replay.Body, resp.Body)
	}
}

// TestPipelinedAnswerIsStoredByteForByte: the 201 body that the pipelined
// transfer builds in the database (around a transfer id only the database
// knew) is the body the client was sent, and json.Marshal of its receipt,
// with ten-digit transfer ids; and so is every replay.
func TestPipelinedAnswerIsStoredByteForByte(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 2)
	if _, err := pool.Exec(context.Background(), "SELECT setval(pg_get_serial_sequence('transfers', 'id'), 2147483000)"); err != nil {
		t.Fatal(err)
	}
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	for i, r := range []struct {
		userID int64
		body   []byte
	}{{1, body(1, 2, 1_234_567)}, {2, body(2, 1, 7)}, {2, []byte(`{"amountKobo":99,"to":1,"from":2}`)}} {
		b := r.body
		k := fmt.Sprintf("byte-for-byte-%04d", i)
		first := handle(t, h, r.userID, k, b)
		if first.Status != 201 {
			t.Fatalf("%s: %s", b, first.Summary())
		}
		rc, _ := first.Receipt()
		marshalled, _ := json.Marshal(rc)
		var stored string
		if err := pool.QueryRow(context.Background(), "SELECT response_body FROM idempotency_keys WHERE key = $1", k).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if rc.TransferID <= 2147483000 || stored != string(first.Body) || stored != string(marshalled) {
			t.Errorf("%s:\n sent     %s\n stored   %s\n marshal  %s", b, first.Body, stored, marshalled)
		}
		replay := handle(t, h, r.userID, k, b)
		if !replay.Replayed || string(replay.Body) != string(first.Body) {
			t.Errorf("%s: replay %s, want %s", b, replay.Body, first.Body)
		}
	}
}

// TestHandlerRoundTrips counts the round trips of a request with a new key,
// a refused one and a replay, once the statements are prepared on the
// connection, pipelined and one statement at a time. The claim is always a
// round trip of its own, which commits before the transfer begins; it
// carries the read of the key's row, which a replay needs.
func TestHandlerRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := bounded(t, "counting round trips")
	conn, counter := pgtest.CountedConn(ctx, t, banks.Template)
	n := 0
	for _, tt := range []struct {
		name        string
		unpipelined bool
		userID      int64
		body        []byte
		replay      bool
		status      int
		want        int64
		why         string
		afterChecks bool // a hook between the checks and the writes
		effects     bool // side effects that read the receipt in the transaction
	}{
		{"new key, pipelined", false, 1, body(1, 2, 100), false, 201, 2, "claim; BEGIN+lock+guard+debit+credit+INSERT+complete+COMMIT", false, false},
		{"new key, one statement at a time", true, 1, body(1, 2, 100), false, 201, 8, "claim; BEGIN; lock; debit; credit; INSERT; complete; COMMIT", false, false},
		{"new key, a hook between the checks and the writes", false, 1, body(1, 2, 100), false, 201, 3, "claim; BEGIN+lock; debit+credit+INSERT+complete+COMMIT", true, false},
		{"new key, side effects", false, 1, body(1, 2, 100), false, 201, 4, "claim; BEGIN+lock+guard+debit+credit+INSERT; the effect's statement; complete+COMMIT", false, true},
		{"refused, pipelined", false, 2, body(2, 1, 9_000_000), false, 422, 5, "claim; BEGIN+lock+guard, which fails; ROLLBACK; BEGIN+lock; complete+COMMIT", false, false},
		{"replay", false, 1, body(1, 2, 100), true, 201, 1, "the claim, which reads the completed key and inserts nothing", false, false},
	} {
		h := &idem.Handler{DB: conn, Store: &idem.Store{}, Unpipelined: tt.unpipelined}
		if tt.effects {
			h.Effects = receiptChecker{}
		}
		// Once to prepare the statements on the connection, once to count.
		for range 2 {
			k := fmt.Sprintf("round-trips-%06d", n)
			if tt.replay {
				k = "round-trips-replayed"
				if _, err := h.Handle(ctx, idem.Request{UserID: tt.userID, Key: k, Body: tt.body}); err != nil {
					t.Fatal(err)
				}
			}
			n++
			counter.N.Store(0)
			hctx, hooked := ctx, 0
			if tt.afterChecks {
				hctx = bank.WithAfterChecks(ctx, func() { hooked++ })
			}
			resp, err := h.Handle(hctx, idem.Request{UserID: tt.userID, Key: k, Body: tt.body})
			if tt.afterChecks && hooked != 1 {
				t.Fatalf("%s: the hook ran %d times, want once", tt.name, hooked)
			}
			if err != nil || resp.Status != tt.status || resp.Replayed != tt.replay {
				t.Fatalf("%s: %s %v, want %d", tt.name, resp.Summary(), err, tt.status)
			}
		}
		if got := counter.N.Load(); got != tt.want {
			t.Errorf("%s: %d round trips, want %d (%s)", tt.name, got, tt.want, tt.why)
		}
	}
}

// receiptChecker is a side effect that holds the receipt it is given
// against the transaction it runs in: the transfer it names must exist and
// the sender must hold the balance it reports. In one round trip both are
// read from the round trip's answers, not computed before it.
type receiptChecker struct{}

func (receiptChecker) InTx(ctx context.Context, tx pgx.Tx, _ int64, rc bank.Receipt) error {
	var balance int64
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT (SELECT balance_kobo FROM accounts WHERE id = $1), EXISTS (SELECT FROM transfers WHERE id = $2)",
		rc.From, rc.TransferID).Scan(&balance, &exists); err != nil {
		return err
	}
	if !exists || balance != rc.BalanceKobo {
		return fmt.Errorf("the receipt %+v: transfer found %v, the sender holds %d", rc, exists, balance)
	}
	return nil
}

func (receiptChecker) AfterCommit(context.Context, int64, bank.Receipt) {}

// TestClaimCommitsBeforeTheLock: the claim commits on its own before the
// transfer begins. While another transaction holds the sender's row, the
// request waits on its lock, and every other session already sees its key
// claimed. (A claim sent in the same round trip as the transfer's BEGIN
// needs a Sync between them for this to hold.)
func TestClaimCommitsBeforeTheLock(t *testing.T) {
	t.Parallel()
	ctx := bounded(t, "a claim visible while its transfer waits for a lock")
	pool := newBank(t, 4)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, WorkTimeout: 5 * time.Second}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM accounts WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		resp bank.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)})
		answered <- answer{resp, err}
	}()
	var status string
	for status == "" {
		err := pool.QueryRow(ctx, "SELECT status FROM idempotency_keys WHERE user_id = 1 AND key = $1", key).Scan(&status)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("waiting for the claim to be seen: %v", err)
		}
		select {
		case a := <-answered:
			t.Fatalf("the request answered %s %v while the sender's row was locked, and no one saw its claim before", a.resp.Summary(), a.err)
		default:
		}
		time.Sleep(time.Millisecond)
	}
	if status != "in_progress" {
		t.Errorf("while the transfer waits, the key is %s, want in_progress", status)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil || a.resp.Status != 201 {
		t.Fatalf("got %s %v, want 201", a.resp.Summary(), a.err)
	}
	if n := transfers(t, pool); n != 1 {
		t.Errorf("%d transfers, want 1", n)
	}
}

// TestReplayLocksNothing: a replay touches no account, so it answers while
// another transaction holds both accounts. (A claim sent together with the
// transfer's locking read needs that read guarded by the claim for this to
// hold.)
func TestReplayLocksNothing(t *testing.T) {
	t.Parallel()
	ctx := bounded(t, "a replay while the accounts are locked")
	pool := newBank(t, 4)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, WorkTimeout: 3 * time.Second}
	first := handle(t, h, 1, key, body(1, 2, 1_000_000))
	if first.Status != 201 {
		t.Fatalf("first request: %s", first.Summary())
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM accounts WHERE id IN (1, 2) FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	resp, err := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)})
	if err != nil || !resp.Replayed || string(resp.Body) != string(first.Body) {
		t.Fatalf("replay while the accounts are locked: %s %v, want the first answer replayed", resp.Summary(), err)
	}
	if n := transfers(t, pool); n != 1 {
		t.Errorf("%d transfers, want 1", n)
	}
}
