package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// inFlightBound is how long a copy of a duplicated request waits inside the
// server for the others. Copies sent together arrive within milliseconds;
// copies sent in turn never meet, so a wrong fault fails after this bound
// whatever it is. 2 s was tight beside a second suite on 2 cores.
const inFlightBound = 10 * time.Second

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Each test here checks what makes a fault that fault, so that a fault that
// loses its defining property (copies that no longer overlap, a response
// lost before the commit, a request that reaches the server after all)
// fails a test instead of quietly weakening every scenario that uses it.

const tapKey = "fault-test-key-00000001"

var tenK = bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}

func delivery() faults.Delivery {
	return faults.Delivery{Attempt: 1, Intent: "tap-1", Request: idem.Request{UserID: 1, Key: tapKey, Body: tenK.Body()}}
}

func env() *faults.Env {
	return faults.NewEnv(1, faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)))
}

// bankServer is the correct handler on a fresh lesson bank.
func bankServer(t *testing.T) (*pgxpool.Pool, *idem.Handler) {
	t.Helper()
	pool := pgtest.NewBank(t, 8)
	return pool, &idem.Handler{DB: pool, Store: &idem.Store{}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// keyState is the key's status and lock, or "absent".
func keyState(t *testing.T, pool *pgxpool.Pool) (status, lock string) {
	t.Helper()
	err := pool.QueryRow(ctx(t), "SELECT status, coalesce(lock_id, '') FROM idempotency_keys WHERE user_id = 1 AND key = $1", tapKey).Scan(&status, &lock)
	if err != nil {
		return "absent", ""
	}
	return status, lock
}

func transfers(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx(t), "SELECT count(*) FROM transfers").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Duplicate's copies are in the server at the same moment, not one after
// the other: each copy waits inside the server until every copy has
// arrived, which copies sent in turn never do (each waits 2 s, and fails).
func TestDuplicateCopiesAreInFlightTogether(t *testing.T) {
	t.Parallel()
	const copies = 3
	var arrived atomic.Int32
	all := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var enter, exit []time.Time
	server := func(ctx context.Context, req idem.Request) (bank.Response, error) {
		mu.Lock()
		enter = append(enter, time.Now())
		mu.Unlock()
		if arrived.Add(1) == copies {
			once.Do(func() { close(all) })
		}
		defer func() {
			mu.Lock()
			exit = append(exit, time.Now())
			mu.Unlock()
		}()
		select {
		case <-all:
			return bank.Created(bank.Receipt{TransferID: 1}), nil
		case <-time.After(inFlightBound):
			return bank.Response{}, fmt.Errorf("a copy waited %s inside the server for the other %d copies: they were not in flight with it", inFlightBound, copies-1)
		}
	}
	var seen []faults.CopyResult
	f := &faults.Duplicate{Copies: copies, Observe: func(c []faults.CopyResult) { seen = c }}
	resp, err := f.Deliver(ctx(t), env(), delivery(), server)
	if err != nil || resp.Status != 201 {
		t.Fatalf("the client saw %s, %v; want the first copy's 201", resp.Summary(), err)
	}
	if len(seen) != copies {
		t.Fatalf("Observe saw %d copies, want %d", len(seen), copies)
	}
	for i, c := range seen {
		if c.Err != nil {
			t.Errorf("copy %d: %v", i, c.Err)
		}
	}
	// Measured overlap: the last copy entered before the first one left.
	last, first := enter[0], exit[0]
	for _, e := range enter {
		if e.After(last) {
			last = e
		}
	}
	for _, x := range exit {
		if x.Before(first) {
			first = x
		}
	}
	if !last.Before(first) {
		t.Errorf("the last copy entered at %s, after the first had left at %s", last.Format(time.StampMicro), first.Format(time.StampMicro))
	}
}

// LoseResponse loses the answer only after the server has committed: when
// the client hears "timed out", the transfer and its completed key are
// already in PostgreSQL.
func TestLoseResponseLosesItAfterTheServerCommitted(t *testing.T) {
	t.Parallel()
	pool, h := bankServer(t)
	var finished atomic.Bool
	server := func(ctx context.Context, req idem.Request) (bank.Response, error) {
		defer finished.Store(true)
		return h.Handle(ctx, req)
	}
	_, err := (&faults.LoseResponse{}).Deliver(ctx(t), env(), delivery(), server)
	if !finished.Load() {
		t.Fatal("the client heard nothing before the server had finished: the answer was lost before the commit")
	}
	if !errors.Is(err, faults.ErrNoResponse) {
		t.Fatalf("the client saw %v, want no response", err)
	}
	if n, st := transfers(t, pool), "completed"; n != 1 {
		t.Errorf("%d transfers when the client heard nothing, want 1 (committed before the answer was lost)", n)
	} else if got, _ := keyState(t, pool); got != st {
		t.Errorf("key %s when the client heard nothing, want %s", got, st)
	}
}

// DropRequest's request never reaches the server: not before Deliver
// returns, and not later either. "Later" is shown without waiting to see:
// Deliver runs under a goroutine label, which every goroutine it starts
// inherits; once none with the label is left, nothing it started can still
// reach the server, and whatever did has already been counted.
func TestDropRequestNeverReachesTheServer(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{}, 1)
	server := func(context.Context, idem.Request) (bank.Response, error) {
		reached <- struct{}{}
		return bank.Created(bank.Receipt{TransferID: 1}), nil
	}
	label := fmt.Sprintf("drop-request-%d", time.Now().UnixNano())
	var err error
	pprof.Do(ctx(t), pprof.Labels("deliver", label), func(ctx context.Context) {
		_, err = (&faults.DropRequest{}).Deliver(ctx, env(), delivery(), server)
	})
	if !errors.Is(err, faults.ErrNoResponse) {
		t.Fatalf("the client saw %v, want no response", err)
	}
	var stacks strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&stacks, 1); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stacks.String(), label) {
		t.Fatalf("Deliver returned and left a goroutine running, which may yet reach the server:\n%s", stacks.String())
	}
	select {
	case <-reached:
		t.Fatal("a dropped request reached the server")
	default:
	}
}

// CrashAfterClaim stops the server right after its claim: the key is left
// in progress under the sleeper's lock, nothing moved; a killed sleeper
// releases nothing, and a woken one finishes the transfer.
func TestCrashAfterClaimLeavesTheKeyClaimed(t *testing.T) {
	t.Parallel()
	for _, woken := range []bool{false, true} {
		t.Run(map[bool]string{false: "killed", true: "woken"}[woken], func(t *testing.T) {
			t.Parallel()
			pool, h := bankServer(t)
			f := &faults.CrashAfterClaim{}
			_, err := f.Deliver(ctx(t), env(), delivery(), h.Handle)
			if !errors.Is(err, faults.ErrNoResponse) {
				t.Fatalf("the client saw %v, want no response", err)
			}
			sleepers := f.Sleepers()
			if len(sleepers) != 1 {
				t.Fatalf("%d stopped servers, want 1", len(sleepers))
			}
			s := sleepers[0]
			if st, lock := keyState(t, pool); st != "in_progress" || lock != s.Claim.LockID || s.Claim.LockID == "" {
				t.Fatalf("key %s under lock %q, want in_progress under the sleeper's lock %q", st, lock, s.Claim.LockID)
			}
			if n := transfers(t, pool); n != 0 {
				t.Fatalf("%d transfers while the server sleeps after its claim, want 0", n)
			}
			if !woken {
				// A dead server does nothing: once its goroutine has ended
				// (Wake after Kill returns then, and does not wake it), the
				// key is still its.
				s.Kill()
				ended := make(chan struct{})
				go func() { _, _ = s.Wake(); close(ended) }()
				select {
				case <-ended:
				case <-time.After(10 * time.Second):
					t.Fatal("the killed server's goroutine had not ended 10 s after the kill")
				}
				if s.CarriedOn() {
					t.Errorf("the killed server carried on past its claim")
				}
				if st, lock := keyState(t, pool); st != "in_progress" || lock != s.Claim.LockID {
					t.Errorf("after the kill the key is %s under %q, want still in_progress under the sleeper's lock", st, lock)
				}
				return
			}
			done := make(chan bank.Response, 1)
			go func() { r, _ := s.Wake(); done <- r }()
			select {
			case r := <-done:
				if r.Status != 201 {
					t.Errorf("the woken server answered %s, want 201", r.Summary())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the woken server did not finish within 10 s")
			}
			if st, _ := keyState(t, pool); st != "completed" || transfers(t, pool) != 1 {
				t.Errorf("after waking: key %s, %d transfers; want completed and 1", st, transfers(t, pool))
			}
		})
	}
}

// FailBeforeCommit breaks the transaction at its last moment: the client is
// told 500, and PostgreSQL rolled everything back, the key released.
func TestFailBeforeCommitRollsEverythingBack(t *testing.T) {
	t.Parallel()
	pool, h := bankServer(t)
	resp, err := (&faults.FailBeforeCommit{}).Deliver(ctx(t), env(), delivery(), h.Handle)
	if err != nil || resp.Status != 500 {
		t.Fatalf("the client saw %s, %v; want 500", resp.Summary(), err)
	}
	if n := transfers(t, pool); n != 0 {
		t.Errorf("%d transfers after a failure before COMMIT, want 0", n)
	}
	if st, _ := keyState(t, pool); st != "absent" {
		t.Errorf("key %s after a failure before COMMIT, want released (absent)", st)
	}
}

// Delay holds the request at least its latency before the server sees it,
// and the answer then comes through; a client that stops waiting first
// sends nothing.
func TestDelayHoldsTheRequestAtLeastItsLatency(t *testing.T) {
	t.Parallel()
	var arrivedAfter time.Duration
	start := time.Now()
	server := func(context.Context, idem.Request) (bank.Response, error) {
		arrivedAfter = time.Since(start)
		return bank.Created(bank.Receipt{TransferID: 7}), nil
	}
	f := &faults.Delay{Latency: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}
	resp, err := f.Deliver(ctx(t), env(), delivery(), server)
	if err != nil || resp.Status != 201 {
		t.Fatalf("the client saw %s, %v; want the server's 201", resp.Summary(), err)
	}
	if arrivedAfter < f.Latency {
		t.Errorf("the request reached the server after %s, before its latency of %s", arrivedAfter, f.Latency)
	}

	// A client that gives up while its request is held: the request never
	// reaches the server, and the client hears at once. The hold is an
	// hour, so only the client's giving up can end it; no deadline races a
	// timer on a loaded machine.
	var reached atomic.Bool
	long := &faults.Delay{Latency: time.Hour}
	gaveUp, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := long.Deliver(gaveUp, env(), delivery(), func(context.Context, idem.Request) (bank.Response, error) {
			reached.Store(true)
			return bank.Response{}, nil
		})
		done <- err
	}()
	cancel()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a client that gave up was still held 10 s later: the delay ignores its context")
	}
	if !errors.Is(err, context.Canceled) || reached.Load() {
		t.Errorf("a client that gave up: err %v, reached the server %v; want context.Canceled and no request", err, reached.Load())
	}
}

// Disconnect ends the request's context at its point and the client hears
// nothing; Deliver returns only once the server's handler has. Against the
// correct handler, whose work runs on a context of its own, every point
// still ends with the transfer done and its key completed; against the
// claim-on-request-context mistake, the point shows: before the claim
// nothing is written, while the claim's answer is on its way the key is
// committed and left in progress by nobody.
func TestDisconnectEndsTheRequestAtItsPoint(t *testing.T) {
	t.Parallel()
	points := []faults.DisconnectPoint{faults.BeforeClaim, faults.DuringClaim, faults.AfterClaim, faults.InTransaction}
	for _, p := range points {
		for _, mistake := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mistake=%v", p, mistake), func(t *testing.T) {
				t.Parallel()
				pool, h := bankServer(t)
				h.ClaimOnRequestContext = mistake
				returned := false
				var serverErr error
				server := func(ctx context.Context, req idem.Request) (bank.Response, error) {
					defer func() { returned = true }()
					resp, err := h.Handle(ctx, req)
					serverErr = err
					return resp, err
				}
				_, err := (&faults.Disconnect{At: p}).Deliver(ctx(t), env(), delivery(), server)
				if !errors.Is(err, faults.ErrNoResponse) {
					t.Fatalf("the client saw %v, want no response", err)
				}
				if !returned {
					t.Fatal("Deliver returned before the server's handler did")
				}
				st, _ := keyState(t, pool)
				n := transfers(t, pool)
				want := map[bool]map[faults.DisconnectPoint]string{
					false: {faults.BeforeClaim: "completed/1", faults.DuringClaim: "completed/1", faults.AfterClaim: "completed/1", faults.InTransaction: "completed/1"},
					true:  {faults.BeforeClaim: "absent/0", faults.DuringClaim: "in_progress/0", faults.AfterClaim: "absent/0", faults.InTransaction: "absent/0"},
				}[mistake][p]
				if got := fmt.Sprintf("%s/%d", st, n); got != want {
					t.Errorf("key/transfers %s, want %s", got, want)
				}
				// Where the mistaken handler's work was cut off says where
				// the client left: the claim, the BEGIN, or the round trip
				// of the writes after the checks (which carries the COMMIT
				// too). The correct handler is never cut off.
				cut := map[faults.DisconnectPoint]string{faults.BeforeClaim: "claim key: ", faults.DuringClaim: "claim key: ",
					faults.AfterClaim: "transfer: context canceled", faults.InTransaction: "transfer: write and commit: "}[p]
				switch {
				case !mistake && serverErr != nil:
					t.Errorf("the correct handler failed: %v", serverErr)
				case mistake && (serverErr == nil || !strings.HasPrefix(serverErr.Error(), cut)):
					t.Errorf("the mistaken handler's error %v, want one starting %q", serverErr, cut)
				}
			})
		}
	}
}
