package outbox_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var t0 = time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)

// addSMSRows commits n sms rows, for transfers 1..n, each in a transaction
// of its own as a transfer would.
func addSMSRows(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= n; i++ {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := outbox.Add(ctx, tx, outbox.Row{Kind: outbox.KindSMS, TransferID: int64(i), UserID: 1,
				Payload: fmt.Sprintf("message %d", i)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// While one dispatcher's claim transaction holds its rows locked, a second
// claim passes over them and takes the next rows, at once: FOR UPDATE SKIP
// LOCKED. Without it, the second claim reads the same rows as free and waits
// for the first's locks, then takes them too.
func TestClaimSkipsRowsAnotherClaimHolds(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBank(t, 6)
	addSMSRows(t, pool, 10)
	p := outbox.NewProvider(1)
	d1 := &outbox.Dispatcher{DB: pool, Name: "d1", SMS: p, Batch: 5}
	d2 := &outbox.Dispatcher{DB: pool, Name: "d2", SMS: p, Batch: 5}
	locked, release := make(chan struct{}), make(chan struct{})
	d1.Hooks.Claimed = func(context.Context, []outbox.Row) { close(locked); <-release }
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := make(chan outbox.Batch, 1)
	go func() {
		b, err := d1.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		first <- b
	}()
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for d1's claim to lock its rows")
	}
	second := make(chan outbox.Batch, 1)
	go func() {
		b, err := d2.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		second <- b
	}()
	var b2 outbox.Batch
	select {
	case b2 = <-second:
	case <-time.After(10 * time.Second):
		free()
		t.Fatal("d2's claim waited 10s for the rows d1's open claim holds: it does not skip locked rows")
	}
	free()
	b1 := <-first
	if len(b1.Rows) != 5 || len(b2.Rows) != 5 {
		t.Fatalf("claimed %d and %d rows, want 5 and 5", len(b1.Rows), len(b2.Rows))
	}
	seen := map[int64]string{}
	for _, b := range []outbox.Batch{b1, b2} {
		for _, r := range b.Rows {
			if other, dup := seen[r.ID]; dup {
				t.Errorf("row %d claimed by %s and by %s", r.ID, other, b.Token)
			}
			seen[r.ID] = b.Token
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_attempts"); n != 10 {
		t.Errorf("%d claims recorded, want 10", n)
	}
}

// Three dispatchers drain one outbox at the same time: every row is sent to
// the provider exactly once, claimed once, and done.
func TestConcurrentDispatchersSendEachRowOnce(t *testing.T) {
	t.Parallel()
	const rows = 150
	pool := pgtest.NewBank(t, 8)
	addSMSRows(t, pool, rows)
	p := outbox.NewProvider(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := make(chan struct{})
	reports := make([]outbox.Report, 3)
	var wg sync.WaitGroup
	for i := range reports {
		d := &outbox.Dispatcher{DB: pool, Name: fmt.Sprintf("d%d", i+1), SMS: p, Batch: 7}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rep, err := d.Drain(ctx)
			if err != nil {
				t.Error(err)
			}
			reports[i] = rep
		}()
	}
	close(start)
	wg.Wait()
	claimed := 0
	for i, r := range reports {
		claimed += r.Claimed
		t.Logf("d%d claimed %d rows", i+1, r.Claimed)
	}
	if claimed != rows || len(p.Calls()) != rows || len(p.Messages()) != rows {
		t.Errorf("claimed %d, %d calls, %d SMS; want %d of each", claimed, len(p.Calls()), len(p.Messages()), rows)
	}
	perTransfer := map[int64]int{}
	for _, c := range p.Calls() {
		perTransfer[c.TransferID]++
	}
	for id, n := range perTransfer {
		if n != 1 {
			t.Errorf("transfer %d's row sent %d times", id, n)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox WHERE done_at IS NULL OR attempts <> 1"); n != 0 {
		t.Errorf("%d rows not done, or claimed more than once", n)
	}
}

// A dispatcher whose lease expired finds its rows taken over: it sends
// nothing, even while the new holder is mid-send; without the claim token it
// sends them too. And a send already under way when the takeover came is not
// marked by it: the row stays the new holder's, and the provider's key keeps
// it to one SMS.
func TestClaimTokenUnderLeaseTakeover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flaws outbox.Flaws
		sends int // calls to the provider for row 1
	}{
		{"with the claim token", outbox.Flaws{}, 1},
		{"without it", outbox.Flaws{NoClaimToken: true}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewBank(t, 4)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := bank.SetClock(ctx, pool, t0); err != nil {
				t.Fatal(err)
			}
			addSMSRows(t, pool, 2)
			p := outbox.NewProvider(1)
			d1 := &outbox.Dispatcher{DB: pool, Name: "d1", SMS: p, Batch: 1, Flaws: tc.flaws}
			d2 := &outbox.Dispatcher{DB: pool, Name: "d2", SMS: p, Batch: 1, Flaws: tc.flaws}

			// Row 1: d1 claims and stalls past its lease; d2 takes over.
			stale, err := d1.Claim(ctx)
			if err != nil || len(stale.Rows) != 1 {
				t.Fatalf("d1's claim: %v %v", stale, err)
			}
			if err := bank.SetClock(ctx, pool, t0.Add(outbox.DefaultLease+time.Second)); err != nil {
				t.Fatal(err)
			}
			fresh, err := d2.Claim(ctx)
			if err != nil || len(fresh.Rows) != 1 || fresh.Rows[0].ID != stale.Rows[0].ID || fresh.Rows[0].Attempts != 2 {
				t.Fatalf("d2's takeover: %+v %v", fresh, err)
			}
			// d1 wakes while d2, having checked its claim, is sending.
			var o outbox.Outcome
			d2.Hooks.BeforeSend = func(context.Context, outbox.Row) {
				d2.Hooks.BeforeSend = nil
				if o, err = d1.Deliver(ctx, stale.Token, stale.Rows[0]); err != nil {
					t.Error(err)
				}
			}
			if _, err := d2.Deliver(ctx, fresh.Token, fresh.Rows[0]); err != nil {
				t.Fatal(err)
			}
			calls := 0
			for _, c := range p.Calls() {
				if c.TransferID == 1 {
					calls++
				}
			}
			if calls != tc.sends {
				t.Errorf("row 1 sent %d times after d1 woke (d1: %s), want %d", calls, o, tc.sends)
			}
			if tc.flaws.NoClaimToken {
				return
			}
			if o != outbox.LostClaim {
				t.Errorf("d1 woke to %q, want %q", o, outbox.LostClaim)
			}

			// Row 2: the takeover comes while d1's send is under way.
			late, err := d1.Claim(ctx)
			if err != nil || len(late.Rows) != 1 {
				t.Fatalf("d1's claim of row 2: %v %v", late, err)
			}
			var taken outbox.Batch
			d1.Hooks.BeforeSend = func(context.Context, outbox.Row) {
				if err := bank.SetClock(ctx, pool, t0.Add(2*outbox.DefaultLease+3*time.Second)); err != nil {
					t.Error(err)
				}
				if taken, err = d2.Claim(ctx); err != nil || len(taken.Rows) != 1 {
					t.Errorf("d2's takeover of row 2: %+v %v", taken, err)
				}
			}
			if o, err := d1.Deliver(ctx, late.Token, late.Rows[0]); err != nil || o != outbox.Stale {
				t.Fatalf("d1's send during the takeover: %q %v, want %q", o, err, outbox.Stale)
			}
			if o, err := d2.Deliver(ctx, taken.Token, taken.Rows[0]); err != nil || o != outbox.AlreadySent {
				t.Fatalf("d2 after d1's send: %q %v, want %q", o, err, outbox.AlreadySent)
			}
			if n := len(p.Messages()); n != 2 {
				t.Errorf("%d SMS for two rows, want 2", n)
			}
			if n := count(t, pool, "SELECT count(*) FROM outbox WHERE done_at IS NOT NULL"); n != 2 {
				t.Errorf("%d rows done, want 2", n)
			}
			var outcomes []string
			rows, _ := pool.Query(ctx, "SELECT outcome FROM outbox_attempts WHERE outbox_id = 2 ORDER BY seq")
			outcomes, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || !equal(outcomes, []string{string(outbox.Stale), string(outbox.AlreadySent)}) {
				t.Errorf("row 2's attempts %q %v", outcomes, err)
			}
		})
	}
}

// A failed send waits out a backoff that doubles, and after MaxAttempts the
// row is failed for good, which the checker reports.
func TestBackoffAndBoundedRetries(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBank(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bank.SetClock(ctx, pool, t0); err != nil {
		t.Fatal(err)
	}
	addSMSRows(t, pool, 1)
	p := outbox.NewProvider(1)
	p.SetDown(true)
	d := &outbox.Dispatcher{DB: pool, Name: "d", SMS: p, MaxAttempts: 3, Backoff: time.Second}
	at := t0
	step := func(advance time.Duration, want outbox.Outcome) {
		t.Helper()
		at = at.Add(advance)
		if err := bank.SetClock(ctx, pool, at); err != nil {
			t.Fatal(err)
		}
		rep, err := d.Drain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" && rep.Claimed != 0 {
			t.Fatalf("at +%s: claimed %d rows during the backoff", at.Sub(t0), rep.Claimed)
		}
		if want != "" && rep.Outcomes[want] != 1 {
			t.Fatalf("at +%s: %v, want one %q", at.Sub(t0), rep.Outcomes, want)
		}
	}
	step(0, outbox.Retry)                // attempt 1; next at +1 s
	step(999*time.Millisecond, "")       // still waiting
	step(time.Millisecond, outbox.Retry) // attempt 2; next at +3 s
	step(1900*time.Millisecond, "")
	step(100*time.Millisecond, outbox.GaveUp) // attempt 3 of 3
	p.SetDown(false)
	step(time.Hour, "")
	if n := count(t, pool, "SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL AND attempts = 3 AND last_error LIKE '%unavailable%'"); n != 1 {
		t.Errorf("the row is not failed after 3 attempts")
	}
	checks, err := outbox.Check(ctx, pool, outbox.World{SMS: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if c.Name == outbox.InvOutboxDone && c.OK {
			t.Errorf("%s holds with a failed row: %s", c.Name, c.Detail)
		}
	}
}

// Only failed sends count towards giving a row up, not claims: a row whose
// first dispatcher died after the provider accepted its SMS, and whose next
// three stalled past their lease, has been claimed four times and has never
// failed. Its fifth claim re-sends it and loses the provider's answer: the
// row waits out its backoff and is then marked sent, one SMS in all.
// Catches the limit read against the claims (failed_at set when attempts
// >= MaxAttempts, the attempts column that every claim bumps): the row is
// failed for good at that first failed send, its SMS delivered and the row
// never done.
func TestClaimsThatNeverFailedDoNotGiveARowUp(t *testing.T) {
	t.Parallel()
	ctx, pool, clock := oneRowAtT0(t)
	p := outbox.NewProvider(1)
	newDispatcher := func(name string) *outbox.Dispatcher {
		return &outbox.Dispatcher{DB: pool, Name: name, SMS: p}
	}

	// Claim 1: the provider accepts the SMS and the dispatcher dies before
	// marking the row (a process that dies runs nothing more, and gives
	// nothing back).
	crash := newDispatcher("d1")
	crash.Hooks.AfterSend = func(context.Context, outbox.Row) { runtime.Goexit() }
	died := make(chan struct{})
	go func() {
		defer close(died)
		_, _ = crash.RunOnce(ctx)
	}()
	select {
	case <-died:
	case <-ctx.Done():
		t.Fatal("the crashing dispatcher never died")
	}
	// Claims 2 to 4: each dispatcher stalls past its lease.
	for i := 2; i <= 4; i++ {
		clock(outbox.DefaultLease + time.Second)
		b, err := newDispatcher(fmt.Sprintf("d%d", i)).Claim(ctx)
		if err != nil || len(b.Rows) != 1 || b.Rows[0].Attempts != i {
			t.Fatalf("claim %d: %+v %v", i, b, err)
		}
	}
	// Claim 5: the re-send's answer is lost.
	clock(outbox.DefaultLease + time.Second)
	lost := 0
	p.LoseIf(func(_ outbox.Message, replay bool) bool {
		lost++
		return replay && lost == 1
	})
	d := newDispatcher("d5")
	rep, err := d.RunOnce(ctx)
	if err != nil || rep.Outcomes[outbox.Retry] != 1 {
		t.Fatalf("the fifth claim: %v %v, want one %q", rep.Outcomes, err, outbox.Retry)
	}
	clock(time.Hour)
	if _, err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var attempts, failures, failed, done int
	if err := pool.QueryRow(ctx, `SELECT attempts, failures, (failed_at IS NOT NULL)::int, (done_at IS NOT NULL)::int
		FROM outbox WHERE id = 1`).Scan(&attempts, &failures, &failed, &done); err != nil {
		t.Fatal(err)
	}
	if failed != 0 || done != 1 {
		t.Errorf("row 1 after %d claims and %d failed send: failed %d, done %d; want done", attempts, failures, failed, done)
	}
	if n := len(p.Messages()); n != 1 {
		t.Errorf("%d SMS sent, want 1", n)
	}
}

// A failure that repeats is no reason to give a row up before MaxAttempts
// failed sends: a row's first send loses the provider's answer (the SMS is
// accepted), and so does its re-send, a replay of its key, with the very
// same timeout. Both wait out their backoff; the third send is answered
// (replayed) and the row is marked sent, one SMS in all. The
// give-up-on-same-error mistake takes the second timeout, equal to the
// row's last_error, for a permanent failure and fails the row for good
// there, its SMS delivered and the row never done.
func TestARepeatedTimeoutDoesNotGiveARowUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		flaws  outbox.Flaws
		second outbox.Outcome // the second send's outcome
		failed int            // rows failed for good at the end
	}{
		{"failed sends counted", outbox.Flaws{}, outbox.Retry, 0},
		{"same error given up", outbox.Flaws{GiveUpOnSameError: true}, outbox.GaveUp, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, pool, clock := oneRowAtT0(t)
			p := outbox.NewProvider(1)
			sends := 0
			p.LoseIf(func(outbox.Message, bool) bool {
				sends++
				return sends <= 2 // the first send's answer and the first replay's
			})
			d := &outbox.Dispatcher{DB: pool, Name: "d", SMS: p, Flaws: tc.flaws}
			for i, want := range []outbox.Outcome{outbox.Retry, tc.second} {
				rep, err := d.RunOnce(ctx)
				if err != nil || rep.Outcomes[want] != 1 {
					t.Fatalf("send %d: %v %v, want one %q", i+1, rep.Outcomes, err, want)
				}
				clock(time.Hour) // past the backoff
			}
			if _, err := d.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			var failures, failed, done int
			var lastErr string
			if err := pool.QueryRow(ctx, `SELECT failures, (failed_at IS NOT NULL)::int, (done_at IS NOT NULL)::int, coalesce(last_error, '')
				FROM outbox WHERE id = 1`).Scan(&failures, &failed, &done, &lastErr); err != nil {
				t.Fatal(err)
			}
			if failed != tc.failed || done != 1-tc.failed {
				t.Errorf("row 1 after %d failed sends (last error %q): failed %d, done %d; want failed %d", failures, lastErr, failed, done, tc.failed)
			}
			if n := len(p.Messages()); n != 1 {
				t.Errorf("%d SMS sent, want 1", n)
			}
		})
	}
}

// An outbox row whose transfer does not exist is a ghost, whether or not it
// was sent yet: the row must exist only if its transfer committed.
func TestCheckFindsAnOutboxRowWithoutItsTransfer(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBank(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func() bank.Check {
		t.Helper()
		checks, err := outbox.Check(ctx, pool, outbox.World{SMS: outbox.NewProvider(1)})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range checks {
			if c.Name == outbox.InvNoGhost {
				return c
			}
		}
		t.Fatalf("no %q among %v", outbox.InvNoGhost, checks)
		return bank.Check{}
	}
	if c := check(); !c.OK {
		t.Fatalf("an empty bank: %s", c.Detail)
	}
	addSMSRows(t, pool, 1) // about transfer 1, which was never made
	if c := check(); c.OK || c.Detail != "outbox row 1 is about transfer 1, which does not exist" {
		t.Errorf("got %+v", c)
	}
}

// oneRowAtT0 is a bank with one SMS row in its outbox, its clock at t0, a
// context bounded at 30 s, and clock, which moves the bank's clock on by
// advance.
func oneRowAtT0(t *testing.T) (ctx context.Context, pool *pgxpool.Pool, clock func(advance time.Duration)) {
	t.Helper()
	pool = pgtest.NewBank(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	at := t0
	clock = func(advance time.Duration) {
		t.Helper()
		at = at.Add(advance)
		if err := bank.SetClock(ctx, pool, at); err != nil {
			t.Fatal(err)
		}
	}
	clock(0)
	addSMSRows(t, pool, 1)
	return ctx, pool, clock
}
