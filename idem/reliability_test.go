package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

func stuckKeys(t testing.TB, db bank.Querier) int {
	return count(t, db, "SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'")
}

// Defect 1 of issue 7: the client goes away at each point of the server's
// work. The correct handler finishes the transfer every time (the retry is
// then a replay) and leaves no key in progress; the claim-on-request-context
// mistake leaves the key claimed and unreleased when the client goes away
// while the claim's answer is on its way back.
func TestDisconnectAtEveryPoint(t *testing.T) {
	t.Parallel()
	points := []faults.DisconnectPoint{faults.BeforeClaim, faults.DuringClaim, faults.AfterClaim, faults.InTransaction}
	for _, mistake := range []bool{false, true} {
		for _, at := range points {
			t.Run(fmt.Sprintf("mistake=%v/%s", mistake, at), func(t *testing.T) {
				t.Parallel()
				pool := newBank(t, 2)
				h := &idem.Handler{DB: pool, Store: &idem.Store{}, ClaimOnRequestContext: mistake}
				f := &faults.Disconnect{At: at}
				_, err := f.Deliver(context.Background(), faults.NewEnv(1, nil), faults.Delivery{Attempt: 1,
					Request: idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)}}, h.Handle)
				if !errors.Is(err, faults.ErrNoResponse) {
					t.Fatalf("the client heard %v, want no response", err)
				}
				stuck, n := stuckKeys(t, pool), transfers(t, pool)
				wantStuck, wantTransfers := 0, 1
				if mistake {
					wantTransfers = 0
					if at == faults.DuringClaim {
						wantStuck = 1
					}
				}
				if stuck != wantStuck || n != wantTransfers {
					t.Errorf("%d keys in progress and %d transfers after the handler returned, want %d and %d", stuck, n, wantStuck, wantTransfers)
				}
				retry := handle(t, h, 1, key, body(1, 2, 1_000_000))
				switch {
				case wantStuck == 1 && retry.Status != 409:
					t.Errorf("retry of the abandoned key: %s, want 409", retry.Summary())
				case wantStuck == 0 && (retry.Status != 201 || retry.Replayed != (wantTransfers == 1)):
					t.Errorf("retry: %s, want 201 (replayed=%v)", retry.Summary(), wantTransfers == 1)
				}
			})
		}
	}
}

// The disconnect point drawn from the seed repeats with the seed, and all
// of them are drawn.
func TestDisconnectAnywhereIsSeeded(t *testing.T) {
	t.Parallel()
	// A stand-in server that passes every hook point of a claim but the
	// transaction's, so the note says which point the fault drew.
	server := func(ctx context.Context, _ idem.Request) (bank.Response, error) {
		h := idem.HooksFrom(ctx)
		if h.BeforeClaim != nil {
			h.BeforeClaim(ctx)
		}
		if h.ClaimCommitted != nil {
			_ = h.ClaimCommitted(context.WithoutCancel(ctx))
		}
		if h.AfterClaim != nil {
			h.AfterClaim(ctx, idem.Claim{})
		}
		return bank.Response{Status: 201}, nil
	}
	draw := func(seed uint64) []string {
		env := faults.NewEnv(seed, nil)
		var notes []string
		env.Note = func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
		f := &faults.Disconnect{}
		for range 16 {
			if _, err := f.Deliver(context.Background(), env, faults.Delivery{}, server); err == nil {
				notes = append(notes, "stayed") // drew the transaction, which this server has not
			}
		}
		return notes
	}
	a, b := draw(5), draw(5)
	if !slices.Equal(a, b) {
		t.Errorf("seed 5 drew %q\nthen %q", a, b)
	}
	distinct := map[string]bool{}
	for _, n := range a {
		distinct[n] = true
	}
	if len(distinct) != 4 {
		t.Errorf("16 draws reached %d different points, want all 4: %q", len(distinct), a)
	}
}

// Defect 4 of issue 7: two servers on one database, one clock 31 s ahead.
// On the database's clock the second is told 409; on its own clock (the
// app-clock mistake) it takes over a lock claimed a moment ago.
func TestLocksExpireOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	for _, appClock := range []bool{false, true} {
		t.Run(fmt.Sprintf("app-clock=%v", appClock), func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 2)
			setClock(t, pool, t0)
			s := &idem.Store{Flaws: idem.Flaws{AppClock: appClock}}
			hash := idem.Fingerprint(idem.Method, idem.Path, body(1, 2, 1_000_000))
			a, err := s.Begin(context.Background(), pool, 1, key, hash, t0)
			if err != nil || a.Action != idem.Proceed {
				t.Fatalf("server A: %v %v", a.Action, err)
			}
			b, err := s.Begin(context.Background(), pool, 1, key, hash, t0.Add(31*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			tookOver := b.Action == idem.Proceed && b.TookOver
			if tookOver != appClock {
				t.Errorf("server B 31 s ahead: %v (took over %v), want a takeover only on app clocks", b.Action, tookOver)
			}
		})
	}
}

// One clock 25 h behind: the key it writes is fresh on the database's clock,
// and the cleanup keeps it; written on its own clock, the cleanup deletes it.
func TestKeyAgesOnTheDatabasesClock(t *testing.T) {
	t.Parallel()
	for _, appClock := range []bool{false, true} {
		t.Run(fmt.Sprintf("app-clock=%v", appClock), func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 2)
			setClock(t, pool, t0)
			s := &idem.Store{Flaws: idem.Flaws{AppClock: appClock}}
			behind := &idem.Handler{DB: pool, Store: s, Now: func() time.Time { return t0.Add(-25 * time.Hour) }}
			if r := handle(t, behind, 1, key, body(1, 2, 1_000_000)); r.Status != 201 {
				t.Fatalf("first: %s", r.Summary())
			}
			setClock(t, pool, t0.Add(time.Hour))
			deleted, err := s.Cleanup(context.Background(), pool, idem.DefaultRetention, t0.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(deleted) == 1; got != appClock {
				t.Errorf("cleanup deleted %q, want the key deleted only on app clocks", deleted)
			}
			right := &idem.Handler{DB: pool, Store: s, Now: func() time.Time { return t0.Add(time.Hour) }}
			retry := handle(t, right, 1, key, body(1, 2, 1_000_000))
			if n := transfers(t, pool); (n == 2) != appClock || retry.Replayed == appClock {
				t.Errorf("retry %s and %d transfers; want a replay and 1 transfer on the database's clock", retry.Summary(), n)
			}
		})
	}
}

// Defect 6 of issue 7: the replay is the first answer byte for byte; with
// the response stored as jsonb it is reordered.
func TestReplayIsByteIdentical(t *testing.T) {
	t.Parallel()
	for _, jsonb := range []bool{false, true} {
		t.Run(fmt.Sprintf("jsonb=%v", jsonb), func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 2)
			h := &idem.Handler{DB: pool, Store: &idem.Store{Flaws: idem.Flaws{JSONBReplay: jsonb}}}
			first := handle(t, h, 1, key, body(1, 2, 1_000_000))
			replay := handle(t, h, 1, key, body(1, 2, 1_000_000))
			if !replay.Replayed {
				t.Fatalf("second answer %s is not a replay", replay.Summary())
			}
			if same := string(first.Body) == string(replay.Body); same == jsonb {
				t.Errorf("first %s\nreplay %s", first.Body, replay.Body)
			}
		})
	}
}

// A request's work is bounded: a transfer blocked on a row lock for longer
// than WorkTimeout gives up, releases its key and returns an error.
func TestWorkTimeoutReleasesTheKey(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 3)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM accounts WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	// The work waits for the row lock above for as long as it is held: any
	// timeout fires there. Long enough that the claim before it has
	// committed even on a loaded machine (300 ms did not, at load 20-36).
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, WorkTimeout: 2 * time.Second}
	_, herr := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)})
	if !errors.Is(herr, context.DeadlineExceeded) {
		t.Errorf("Handle: %v, want the work timeout", herr)
	}
	if k := keyRows(t, pool); k != 0 {
		t.Errorf("%d keys left after the work timed out, want the key released", k)
	}
}
