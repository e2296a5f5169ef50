package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// What makes each of chaos's own faults that fault, tested on the engine
// itself: a late request reaches the server only after its client's attempt
// has ended; a slow one is answered; a clock jump moves the clock past the
// lock's TTL before the request runs; a deadlock makes PostgreSQL abort the
// transfer and InTx run it again; a lock that expires mid-write is taken
// over by a retry and its holder fails the fencing check; a disconnected
// client leaves a server that finishes its work.

// fakeEngine is an engine whose every server copy is server; no database.
func fakeEngine(server faults.Server) *engine {
	e := newEngine(nil, Config{Seed: 1}.WithDefaults())
	for k := range e.servers {
		e.servers[k] = server
	}
	e.start = time.Now()
	return e
}

func aTransfer(e *engine) Planned {
	from := e.lay.hot[0]
	return Planned{Label: "intent-0", UserID: e.lay.byID[from].OwnerID, Key: "fault-test-key-0000001",
		Request: bank.TransferRequest{From: from, To: e.lay.hot[1], AmountKobo: 1_000}}
}

func TestLateRequestReachesTheServerAfterItsClientGaveUp(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int64
	var e *engine
	e = fakeEngine(func(context.Context, idem.Request) (bank.Response, error) {
		arrived.Store(e.since())
		return bank.Created(bank.Receipt{TransferID: 1}), nil
	})
	// Twenty times: a request that raced its client's attempt would, now
	// and then, arrive before the attempt ended.
	for range 20 {
		arrived.Store(0)
		a := e.attempt(context.Background(), 0, aTransfer(e), 1, PhaseFault, FaultLate)
		if a.Seen != SeenUnknown || a.Error == "" {
			t.Fatalf("the client saw %+v, want no answer", a)
		}
		if err := e.late.wait(context.Background(), 10*time.Second, "the late request"); err != nil {
			t.Fatal(err)
		}
		if at := arrived.Load(); at == 0 || at <= a.EndNs {
			t.Fatalf("the request reached the server at %s, not after the client's attempt ended at %s", time.Duration(at), time.Duration(a.EndNs))
		}
	}
}

// Over HTTP the late fault drops the client's connection, and the request
// reaches the server only once the client has recorded that attempt. The
// test is the client's gate: it records the attempt by handing the held
// request a token on an unbuffered channel, which succeeds only if the
// request is waiting at the gate; a request that went on without waiting
// reaches the server instead, and no amount of load lets it pass for one
// that waited.
func TestLateConnReachesTheServerAfterItsClientGaveUp(t *testing.T) {
	t.Parallel()
	e := fakeEngine(nil)
	var arrived atomic.Int64
	reached := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived.Store(e.since())
		reached <- struct{}{}
		w.WriteHeader(201)
	}))
	defer srv.Close()
	p, err := faults.StartProxy(strings.TrimPrefix(srv.URL, "http://"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	gone := make(chan struct{})
	p.On(&lateConn{e: e, gone: gone})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Post(p.URL()+"/transfers", "application/json", strings.NewReader(`{}`))
	if err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		t.Fatal("the client got an answer from a late request")
	}
	gaveUp := e.since()
	// Bounded below attemptTimeout, after which a late request goes on
	// without its client.
	select {
	case gone <- struct{}{}:
	case <-reached:
		t.Fatalf("the request reached the server at %s, before its client had recorded the attempt", time.Duration(arrived.Load()))
	case <-time.After(attemptTimeout / 2):
		t.Fatalf("%s after the client gave up, the late request neither waited for it nor reached the server", attemptTimeout/2)
	}
	if err := e.late.wait(context.Background(), 10*time.Second, "the late request"); err != nil {
		t.Fatal(err)
	}
	if at := arrived.Load(); at <= gaveUp {
		t.Errorf("the request reached the server at %s, not after the client gave up at %s", time.Duration(at), time.Duration(gaveUp))
	}
}

func TestSlowRequestIsAnsweredInTime(t *testing.T) {
	t.Parallel()
	e := fakeEngine(func(context.Context, idem.Request) (bank.Response, error) {
		return bank.Created(bank.Receipt{TransferID: 1}), nil
	})
	a := e.attempt(context.Background(), 0, aTransfer(e), 1, PhaseFault, FaultSlow)
	if a.Seen != SeenOK {
		t.Fatalf("the client saw %+v, want the server's 201", a)
	}
	if d := time.Duration(a.EndNs - a.StartNs); d < time.Millisecond {
		t.Errorf("the slow attempt took %s, less than its 1 ms", d)
	}
}

func TestClockJumpPassesTheLockTTLBeforeTheRequestRuns(t *testing.T) {
	t.Parallel()
	var at time.Time
	var e *engine
	e = fakeEngine(func(context.Context, idem.Request) (bank.Response, error) {
		at = e.clock.Now()
		return bank.Created(bank.Receipt{TransferID: 1}), nil
	})
	before := e.clock.Now()
	e.attempt(context.Background(), 0, aTransfer(e), 1, PhaseFault, FaultClockJump)
	if jumped := at.Sub(before); jumped <= idem.DefaultLockTTL {
		t.Errorf("the request ran %s after the jump began, not past the lock's TTL of %s", jumped, idem.DefaultLockTTL)
	}
}

// realEngine is an engine on a fresh bank of its own, with the run's pool.
func realEngine(t *testing.T) *engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := banks.OnServer(pgtest.Server(t), banks.Options{}).NewBank(ctx, "chaos-fault")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	pool, err := Pool(ctx, db.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	e := newEngine(pool, Config{Seed: 1}.WithDefaults())
	if err := e.open(ctx); err != nil {
		t.Fatal(err)
	}
	e.start = time.Now()
	// The correct handler always takes the key over: wait for it, with a
	// bound that means "hung", not "slow" (500 ms missed at load 20).
	e.takeoverWait = 30 * time.Second
	return e
}

func keyStatus(t *testing.T, e *engine, p Planned) string {
	t.Helper()
	var st string
	if err := e.db.QueryRow(context.Background(), "SELECT status FROM idempotency_keys WHERE user_id = $1 AND key = $2", p.UserID, p.Key).Scan(&st); err != nil {
		return "absent"
	}
	return st
}

func TestDeadlockAbortsTheTransferAndInTxRunsItAgain(t *testing.T) {
	t.Parallel()
	e := realEngine(t)
	p := aTransfer(e)
	a := e.attempt(context.Background(), 0, p, 1, PhaseFault, FaultDeadlock)
	if a.Status != 201 {
		t.Fatalf("the client saw %+v, want 201: a deadlock is retried, never a client's problem", a)
	}
	if err := e.late.wait(context.Background(), 10*time.Second, "the other transaction"); err != nil {
		t.Fatal(err)
	}
	if n := e.server[PathTxRetry]; n != 1 || len(e.stalls) > 0 {
		t.Errorf("%d transactions run again after a deadlock, want 1 (stalls: %v)", n, e.stalls)
	}
}

func TestExpireMidWriteHandsTheKeyToARetryAndFencesTheHolder(t *testing.T) {
	t.Parallel()
	e := realEngine(t)
	p := aTransfer(e)
	a := e.attempt(context.Background(), 0, p, 1, PhaseFault, FaultExpireMidWrite)
	if a.Status != 500 || !strings.Contains(a.Error, idem.ErrLostLock.Error()) {
		t.Fatalf("the holder's client saw %+v, want 500 from a lost lock", a)
	}
	if err := e.late.wait(context.Background(), 10*time.Second, "the retry that took the key over"); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{PathExpiredMidWrite, PathTakeover, PathFencing} {
		if n := e.server[path]; n != 1 {
			t.Errorf("%s: %d, want 1 (stalls: %v)", path, n, e.stalls)
		}
	}
	l, err := bank.ReadLedger(context.Background(), e.db)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Transfers) != 1 || keyStatus(t, e, p) != "completed" {
		t.Errorf("%d transfers, key %s; want the retry's one transfer and its completed key", len(l.Transfers), keyStatus(t, e, p))
	}
}

// A disconnect cuts the request at the point the seed picks for that
// attempt: the correct handler finishes its work at every point, and the
// claim-on-request-context mistake leaves behind what that point makes it
// leave (a key in progress with nobody on it only when the client left
// while the claim's answer was on its way).
func TestDisconnectCutsTheRequestAtItsSeededPoint(t *testing.T) {
	t.Parallel()
	left := map[faults.DisconnectPoint]string{faults.BeforeClaim: "absent", faults.DuringClaim: "in_progress",
		faults.AfterClaim: "absent", faults.InTransaction: "absent"}
	for point, mistaken := range left {
		t.Run(point.String(), func(t *testing.T) {
			t.Parallel()
			i := -1
			for k := range 256 {
				if (Config{Seed: 1}).DisconnectPoint(k, 1) == point {
					i = k
					break
				}
			}
			if i < 0 {
				t.Fatalf("no intent among 256 meets a disconnect %s", point)
			}
			for _, mistake := range []bool{false, true} {
				e := realEngine(t)
				if mistake {
					bug, _ := mistakes.Lookup("claim-on-request-context")
					for _, h := range e.handlers {
						bug.Apply(h)
					}
				}
				p := aTransfer(e)
				p.Key = fmt.Sprintf("%s-%v", p.Key, mistake)
				a := e.attempt(context.Background(), i, p, 1, PhaseFault, FaultDisconnect)
				if a.Seen != SeenUnknown || !strings.Contains(a.Error, "connection was lost") {
					t.Fatalf("the client saw %+v, want no answer", a)
				}
				want, finished := "completed", 1
				if mistake {
					want, finished = mistaken, 0
				}
				if st := keyStatus(t, e, p); st != want {
					t.Errorf("mistake %v: key %s, want %s", mistake, st, want)
				}
				if n := e.server[PathDisconnectFinished]; n != finished {
					t.Errorf("mistake %v: %d servers finished after their client left, want %d", mistake, n, finished)
				}
			}
		})
	}
}

// A freeze staged between a transfer's checks and its debit waits for the
// transfer's row lock, and gives up; without the row lock (the no-row-lock
// mistake) it commits under the transfer, which debits a frozen account,
// and the account is made active again once the attempt is over.
func TestFreezeWaitsForTheTransfersRowLock(t *testing.T) {
	t.Parallel()
	for _, mistake := range []bool{false, true} {
		t.Run(fmt.Sprintf("no-row-lock=%v", mistake), func(t *testing.T) {
			t.Parallel()
			e := realEngine(t)
			if mistake {
				bug, _ := mistakes.Lookup("no-row-lock")
				for _, h := range e.handlers {
					bug.Apply(h)
				}
			}
			p := aTransfer(e)
			a := e.attempt(context.Background(), 0, p, 1, PhaseFault, FaultFreeze)
			if a.Status != 201 {
				t.Fatalf("the client saw %+v, want 201", a)
			}
			waited, frozen := e.server[PathFreezeWaited], len(e.freezes)
			if !mistake && (waited != 1 || frozen != 0) || mistake && (waited != 0 || frozen != 1) {
				t.Errorf("freezes that waited %d, that went through %d (stalls %v)", waited, frozen, e.stalls)
			}
			var status string
			if err := e.db.QueryRow(context.Background(), "SELECT status FROM accounts WHERE id = $1", p.Request.From).Scan(&status); err != nil || status != "active" {
				t.Errorf("after the attempt account %d is %s (%v), want active again", p.Request.From, status, err)
			}
		})
	}
}
