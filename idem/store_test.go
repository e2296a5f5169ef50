package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/jackc/pgx/v5"
)

const key = "tap-2026-09-24-0001"

var (
	hashTenK   = idem.Fingerprint(idem.Method, idem.Path, body(1, 2, 1_000_000))
	hashFiftyK = idem.Fingerprint(idem.Method, idem.Path, body(1, 2, 5_000_000))
	receipt    = bank.Created(bank.Receipt{TransferID: 1, From: 1, To: 2, AmountKobo: 1_000_000, BalanceKobo: 4_000_000})
)

// begin claims the test's key with the database's clock stopped at now: the
// clock the store measures locks on.
func begin(t *testing.T, s *idem.Store, db bank.Querier, userID int64, hash string, now time.Time) idem.Claim {
	t.Helper()
	setClock(t, db, now)
	c, err := s.Begin(bounded(t, "claiming key "+key), db, userID, key, hash, time.Time{})
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return c
}

func setClock(t testing.TB, db bank.Querier, now time.Time) {
	t.Helper()
	if err := bank.SetClock(context.Background(), db, now); err != nil {
		t.Fatal(err)
	}
}

func complete(t *testing.T, s *idem.Store, db bank.DB, userID int64, lockID string, resp bank.Response) error {
	t.Helper()
	ctx := bounded(t, "completing key "+key)
	return bank.InTx(ctx, db, func(tx pgx.Tx) error {
		return s.Complete(ctx, tx, userID, key, lockID, resp)
	})
}

func wantProceed(t *testing.T, c idem.Claim, tookOver bool) {
	t.Helper()
	if c.Action != idem.Proceed || c.LockID == "" || c.TookOver != tookOver {
		t.Fatalf("claim %+v, want proceed with a lock id (tookOver=%v)", c, tookOver)
	}
}

func wantRespond(t *testing.T, c idem.Claim, status int, code string) {
	t.Helper()
	if c.Action != idem.Respond || c.Response.Status != status || c.Response.Code() != code || c.LockID != "" {
		t.Fatalf("claim %v %s, want respond %d %s", c.Action, c.Response.Summary(), status, code)
	}
}

func wantReplay(t *testing.T, c idem.Claim, want bank.Response) {
	t.Helper()
	if c.Action != idem.Replay || !c.Response.Replayed || c.Response.Status != want.Status {
		t.Fatalf("claim %v %s, want replay of %s", c.Action, c.Response.Summary(), want.Summary())
	}
	// A replay is the original answer, byte for byte.
	if string(c.Response.Body) != string(want.Body) {
		t.Fatalf("replayed body %s, want %s", c.Response.Body, want.Body)
	}
}

func TestStore(t *testing.T) {
	t.Parallel()

	t.Run("first Begin proceeds and stores an in-progress claim", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		c := begin(t, s, pool, 1, hashTenK, t0)
		wantProceed(t, c, false)
		var status, lockID, hash string
		var until, created time.Time
		err := pool.QueryRow(context.Background(),
			"SELECT status, lock_id, request_hash, locked_until, created_at FROM idempotency_keys WHERE user_id = 1 AND key = $1", key).
			Scan(&status, &lockID, &hash, &until, &created)
		if err != nil {
			t.Fatal(err)
		}
		if status != "in_progress" || lockID != c.LockID || hash != hashTenK || !until.Equal(t0.Add(idem.DefaultLockTTL)) || !created.Equal(t0) {
			t.Errorf("row: %s %s %s until %v created %v", status, lockID, hash, until, created)
		}
	})

	t.Run("same request while in progress gets 409", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		first := begin(t, s, pool, 1, hashTenK, t0)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(1)), 409, idem.CodeInProgress)
		// The 409 did not disturb the holder's claim.
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Errorf("holder could not complete after a 409: %v", err)
		}
	})

	// The claim reads and inserts in one statement, whose snapshot cannot
	// see a claim that commits while its INSERT waits on it: the INSERT
	// finds the key taken, the read finds no row. Begin claims again and
	// reads it then (409 while the holder's lock is valid); if the holder
	// rolls back instead, the waiting INSERT claims the key itself.
	for _, holderCommits := range []bool{true, false} {
		name := map[bool]string{true: "commits: the claim reads it on a second try and gets 409",
			false: "rolls back: the waiting claim takes the key"}[holderCommits]
		t.Run("a claim waiting on another's uncommitted claim, which "+name, func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 3)
			s := &idem.Store{}
			setClock(t, pool, t0)
			ctx := bounded(t, "the race between two claims of "+key)
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Rollback(context.Background())
			if _, err := holder.Exec(ctx, `INSERT INTO idempotency_keys (user_id, key, request_hash, status, lock_id, locked_until, created_at)
				VALUES (1, $1, $2, 'in_progress', 'the-holder', $3, $4)`, key, hashTenK, at(30), t0); err != nil {
				t.Fatal(err)
			}
			var tries atomic.Int32
			type result struct {
				c   idem.Claim
				err error
			}
			done := make(chan result, 1)
			go func() {
				c, err := s.Begin(idem.WithHooks(ctx, idem.Hooks{BeforeClaim: func(context.Context) { tries.Add(1) }}),
					pool, 1, key, hashTenK, time.Time{})
				done <- result{c, err}
			}()
			// Wait until the claim's INSERT waits on the holder's row. The
			// holder's own pid, not any ungranted lock: pg_locks is the whole
			// server's, and another test's bank on it had a lock waiting
			// (the holder then committed before the claim was sent).
			waiting := fmt.Sprintf("SELECT count(*) FROM pg_stat_activity WHERE %d = ANY (pg_blocking_pids(pid))", holder.Conn().PgConn().PID())
			for count(t, pool, waiting) == 0 {
				select {
				case r := <-done:
					t.Fatalf("the claim returned (%v %s, %v) before the holder ended", r.c.Action, r.c.Response.Summary(), r.err)
				case <-ctx.Done():
					t.Fatal(context.Cause(ctx))
				case <-time.After(5 * time.Millisecond):
				}
			}
			if holderCommits {
				err = holder.Commit(ctx)
			} else {
				err = holder.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal(context.Cause(ctx))
			}
			if r.err != nil {
				t.Fatalf("Begin: %v", r.err)
			}
			if holderCommits {
				wantRespond(t, r.c, 409, idem.CodeInProgress)
				if n := tries.Load(); n != 2 {
					t.Errorf("%d claims sent, want 2 (the first cannot see the holder's row)", n)
				}
			} else {
				wantProceed(t, r.c, false)
				if n := tries.Load(); n != 1 {
					t.Errorf("%d claims sent, want 1", n)
				}
			}
			if n := keyRows(t, pool); n != 1 {
				t.Errorf("%d key rows, want 1", n)
			}
		})
	}

	t.Run("different request with the same key gets 422", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		first := begin(t, s, pool, 1, hashTenK, t0)
		wantRespond(t, begin(t, s, pool, 1, hashFiftyK, at(1)), 422, idem.CodeKeyReused)
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Fatal(err)
		}
		// Still 422 after completion: never a replay of another request's answer.
		wantRespond(t, begin(t, s, pool, 1, hashFiftyK, at(2)), 422, idem.CodeKeyReused)
	})

	t.Run("completed key replays the stored response", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		first := begin(t, s, pool, 1, hashTenK, t0)
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, begin(t, s, pool, 1, hashTenK, at(5)), receipt)
		// Long after any lock would have expired, still a replay.
		wantReplay(t, begin(t, s, pool, 1, hashTenK, at(3600)), receipt)
		if n := keyRows(t, pool); n != 1 {
			t.Errorf("%d key rows, want 1", n)
		}
	})

	t.Run("a stored refusal is replayed too", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		refusal := bank.Reject(422, bank.CodeInsufficientFunds, "The balance is too low for this transfer")
		first := begin(t, s, pool, 1, hashTenK, t0)
		if err := complete(t, s, pool, 1, first.LockID, refusal); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, begin(t, s, pool, 1, hashTenK, at(1)), refusal)
	})

	t.Run("keys are scoped per user", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		first := begin(t, s, pool, 1, hashTenK, t0)
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Fatal(err)
		}
		wantProceed(t, begin(t, s, pool, 2, hashTenK, at(1)), false)
		if n := keyRows(t, pool); n != 2 {
			t.Errorf("%d key rows, want one per user", n)
		}
	})

	t.Run("flaw Unscoped: another user is replayed the first user's response", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{Flaws: idem.Flaws{Unscoped: true}}
		first := begin(t, s, pool, 1, hashTenK, t0)
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, begin(t, s, pool, 2, hashTenK, at(1)), receipt)
	})

	t.Run("flaw NoFingerprint: a different request is replayed", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{Flaws: idem.Flaws{NoFingerprint: true}}
		first := begin(t, s, pool, 1, hashTenK, t0)
		if err := complete(t, s, pool, 1, first.LockID, receipt); err != nil {
			t.Fatal(err)
		}
		wantReplay(t, begin(t, s, pool, 1, hashFiftyK, at(1)), receipt)
	})

	t.Run("expired lock is taken over, a live one is not", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		stuck := begin(t, s, pool, 1, hashTenK, t0)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(10)), 409, idem.CodeInProgress)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(30)), 409, idem.CodeInProgress) // locked_until is not < now
		retry := begin(t, s, pool, 1, hashTenK, at(31))
		wantProceed(t, retry, true)
		if retry.LockID == stuck.LockID {
			t.Fatal("takeover kept the old lock id")
		}
		// The new holder's lock runs from the takeover, not from the first claim.
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(60)), 409, idem.CodeInProgress)

		// Fencing: the slow first server cannot complete any more.
		if err := complete(t, s, pool, 1, stuck.LockID, receipt); !errors.Is(err, idem.ErrLostLock) {
			t.Fatalf("Complete with the old lock id: %v, want ErrLostLock", err)
		}
		if err := complete(t, s, pool, 1, retry.LockID, receipt); err != nil {
			t.Fatalf("Complete by the new holder: %v", err)
		}
		wantReplay(t, begin(t, s, pool, 1, hashTenK, at(62)), receipt)
	})

	t.Run("custom LockTTL", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{LockTTL: 5 * time.Second}
		begin(t, s, pool, 1, hashTenK, t0)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(4)), 409, idem.CodeInProgress)
		wantProceed(t, begin(t, s, pool, 1, hashTenK, at(6)), true)
	})

	t.Run("flaw NoExpiry: a stuck key blocks forever", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{Flaws: idem.Flaws{NoExpiry: true}}
		begin(t, s, pool, 1, hashTenK, t0)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(31)), 409, idem.CodeInProgress)
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(3600)), 409, idem.CodeInProgress)
	})

	t.Run("flaw NoFencing: the slow server completes after a takeover", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{Flaws: idem.Flaws{NoFencing: true}}
		stuck := begin(t, s, pool, 1, hashTenK, t0)
		wantProceed(t, begin(t, s, pool, 1, hashTenK, at(31)), true)
		if err := complete(t, s, pool, 1, stuck.LockID, receipt); err != nil {
			t.Fatalf("Complete with the old lock id under NoFencing: %v, want success", err)
		}
		wantReplay(t, begin(t, s, pool, 1, hashTenK, at(32)), receipt)
	})

	t.Run("Complete of an unknown key is a lost lock", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		if err := complete(t, s, pool, 1, "no-such-lock", receipt); !errors.Is(err, idem.ErrLostLock) {
			t.Fatalf("err = %v, want ErrLostLock", err)
		}
	})

	t.Run("Release deletes only with the holder's lock id", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		ctx := context.Background()
		c := begin(t, s, pool, 1, hashTenK, t0)
		if err := s.Release(ctx, pool, 1, key, "someone-else"); err != nil {
			t.Fatal(err)
		}
		if n := keyRows(t, pool); n != 1 {
			t.Fatalf("Release with a wrong lock id deleted the key (%d rows)", n)
		}
		if err := s.Release(ctx, pool, 2, key, c.LockID); err != nil {
			t.Fatal(err)
		}
		if n := keyRows(t, pool); n != 1 {
			t.Fatalf("Release by another user deleted the key (%d rows)", n)
		}
		if err := s.Release(ctx, pool, 1, key, c.LockID); err != nil {
			t.Fatal(err)
		}
		if n := keyRows(t, pool); n != 0 {
			t.Fatalf("Release with the right lock id left %d rows", n)
		}
		// Released: the next Begin claims afresh (not a takeover).
		wantProceed(t, begin(t, s, pool, 1, hashTenK, at(1)), false)
	})

	t.Run("Release after a takeover leaves the new holder's claim", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		old := begin(t, s, pool, 1, hashTenK, t0)
		wantProceed(t, begin(t, s, pool, 1, hashTenK, at(31)), true)
		if err := s.Release(context.Background(), pool, 1, key, old.LockID); err != nil {
			t.Fatal(err)
		}
		wantRespond(t, begin(t, s, pool, 1, hashTenK, at(32)), 409, idem.CodeInProgress)
	})
}

func TestCleanup(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 2)
	ctx := context.Background()
	now := time.Date(2026, 9, 24, 3, 0, 0, 0, time.UTC)
	hoursAgo := func(h float64) time.Time { return now.Add(-time.Duration(h * float64(time.Hour))) }
	_, err := pool.Exec(ctx, `
		INSERT INTO idempotency_keys (user_id, key, request_hash, status, lock_id, locked_until, created_at) VALUES
		(1, 'old-completed', 'h', 'completed', NULL, NULL, $1),
		(1, 'new-completed', 'h', 'completed', NULL, NULL, $2),
		(1, 'old-stuck', 'h', 'in_progress', 'lock-1', $3, $1),
		(1, 'old-but-held', 'h', 'in_progress', 'lock-2', $4, $1)`,
		hoursAgo(48), hoursAgo(1), hoursAgo(47), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	s := &idem.Store{}
	setClock(t, pool, now)
	deleted, err := s.Cleanup(ctx, pool, idem.DefaultRetention, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(deleted)
	if want := []string{"old-completed", "old-stuck"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %q, want %q", deleted, want)
	}
	rows, err := pool.Query(ctx, "SELECT key FROM idempotency_keys ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"new-completed", "old-but-held"}; !slices.Equal(kept, want) {
		t.Errorf("kept %q, want %q", kept, want)
	}

	// However late the cutoff (a retention of -24 h puts it a day ahead), a
	// key with a valid lock is never deleted.
	deleted, err = s.Cleanup(ctx, pool, -24*time.Hour, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"new-completed"}) {
		t.Errorf("with a future cutoff deleted %q, want only new-completed", deleted)
	}
	if n := count(t, pool, "SELECT count(*) FROM idempotency_keys WHERE key = 'old-but-held'"); n != 1 {
		t.Error("a key whose lock is still valid was deleted")
	}
	// Once its lock has expired, it goes.
	setClock(t, pool, now.Add(2*time.Hour))
	deleted, err = s.Cleanup(ctx, pool, 26*time.Hour, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(deleted, []string{"old-but-held"}) {
		t.Errorf("after its lock expired deleted %q, want old-but-held", deleted)
	}
}

func TestSeededLockIDs(t *testing.T) {
	t.Parallel()
	seq := func(seed uint64) []string {
		next := idem.SeededLockIDs(seed)
		out := make([]string, 8)
		for i := range out {
			out[i] = next()
		}
		return out
	}
	a, b, c := seq(42), seq(42), seq(43)
	if !slices.Equal(a, b) {
		t.Errorf("seed 42 gave %q then %q", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same sequence %q", a)
	}
	seen := map[string]bool{}
	for _, id := range a {
		if seen[id] {
			t.Errorf("lock id %q repeated within one sequence", id)
		}
		seen[id] = true
	}
	for _, id := range c {
		if seen[id] {
			t.Errorf("lock id %q appears under both seeds", id)
		}
	}
}
