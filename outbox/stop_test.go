package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// checkOnce asserts that each of transfers 1..n was texted exactly once and
// that no claim overlapped another (a claim given back is settled before the
// next one takes the row). The rows are about no real transfer, so only
// the claims are checked, not the ghost rule.
func checkOnce(t *testing.T, ctx context.Context, pool *pgxpool.Pool, p *outbox.Provider, n int) {
	t.Helper()
	per := map[int64]int{}
	for _, m := range p.Messages() {
		per[m.TransferID]++
	}
	for id := int64(1); id <= int64(n); id++ {
		if per[id] != 1 {
			t.Errorf("transfer %d texted %d times, want once", id, per[id])
		}
	}
	checks, err := outbox.Check(ctx, pool, outbox.World{Leases: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
}

// Issue 19, item 4: a dispatcher stopped with a claim in flight gives its
// rows back, so that the next claim (serve's last drain) takes them at once
// rather than after the 30 s lease; before, the last drain passed over them
// and serve dropped the bank with those SMS unsent.
func TestStoppedDispatcherGivesBackItsClaim(t *testing.T) {
	t.Parallel()
	const rows = 5
	pool := pgtest.NewBank(t, 6)
	addSMSRows(t, pool, rows)
	p := outbox.NewProvider(1)
	inFlight := make(chan struct{})
	d := &outbox.Dispatcher{DB: pool, Name: "stopped", SMS: p, Batch: rows}
	d.Hooks.BeforeSend = func(ctx context.Context, r outbox.Row) {
		if r.ID != 1 {
			return
		}
		close(inFlight)
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
			t.Error("waited 30s for the dispatcher to be stopped")
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	type result struct {
		rep outbox.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := d.RunOnce(ctx)
		done <- result{rep, err}
	}()
	select {
	case <-inFlight:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for the dispatcher to come to its first send")
	}
	stop()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for the stopped dispatcher to return")
	}
	if res.err == nil || res.rep.Outcomes[outbox.Released] != rows {
		t.Errorf("the stopped dispatcher: %+v, %v; want every row of its batch released and the stop's error", res.rep, res.err)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox WHERE claim_token IS NOT NULL OR claimed_until IS NOT NULL"); n != 0 {
		t.Errorf("%d rows still claimed after the dispatcher stopped", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox_attempts WHERE outcome IS DISTINCT FROM $1", string(outbox.Released)); n != 0 {
		t.Errorf("%d attempts not settled as released", n)
	}

	// The next dispatcher takes them at once: no lease to wait out.
	next := &outbox.Dispatcher{DB: pool, Name: "next", SMS: p}
	rep, err := next.Drain(context.Background())
	if err != nil || rep.Outcomes[outbox.Sent] != rows {
		t.Errorf("the next dispatcher: %+v, %v; want %d sent", rep, err, rows)
	}
	checkOnce(t, context.Background(), pool, p, rows)
}

// Issue 19, item 4: the last drain of a process whose dispatchers have all
// stopped (Final) sends every row that is not done: those a dispatcher
// that died still holds under a running lease, and one waiting out its
// backoff after a failed send, as well as the free ones.
func TestFinalSendsRowsStoppedDispatchersHold(t *testing.T) {
	t.Parallel()
	const rows = 5
	pool := pgtest.NewBank(t, 6)
	addSMSRows(t, pool, rows)
	p := outbox.NewProvider(1)
	ctx := context.Background()
	// d1 claims rows 1-3 and dies before sending anything.
	dead := &outbox.Dispatcher{DB: pool, Name: "dead", SMS: p, Batch: 3}
	if b, err := dead.Claim(ctx); err != nil || len(b.Rows) != 3 {
		t.Fatalf("claim: %d rows, %v", len(b.Rows), err)
	}
	// Row 4's send fails: it waits out a backoff of a minute.
	p.SetDown(true)
	failing := &outbox.Dispatcher{DB: pool, Name: "failing", SMS: p, Batch: 1, Backoff: time.Minute}
	if rep, err := failing.RunOnce(ctx); err != nil || rep.Outcomes[outbox.Retry] != 1 {
		t.Fatalf("the failing send: %+v, %v", rep, err)
	}
	p.SetDown(false)

	last := &outbox.Dispatcher{DB: pool, Name: "last", SMS: p}
	rep, err := last.Final(ctx)
	if err != nil || rep.Outcomes[outbox.Sent] != rows || rep.Outcomes[outbox.Released] != 4 {
		t.Errorf("Final: %+v, %v; want %d sent, 4 taken back (3 claimed, 1 in backoff)", rep, err, rows)
	}
	left, err := outbox.Unsent(ctx, pool)
	if err != nil || len(left) != 0 {
		t.Errorf("unsent after Final: %+v, %v", left, err)
	}
	checkOnce(t, ctx, pool, p, rows)
}

// Final waits for a row whose lock a cut-off claim still holds, instead of
// skipping it as a running dispatcher's claim does: serve's stop cancels
// its dispatcher mid-claim, and that claim's backend keeps the row locked
// until it sees its connection closed. Skipped, the row's SMS was named
// unsent and dropped with the bank (3 stops in 30 at load 8).
func TestFinalWaitsForARowACutOffClaimStillLocks(t *testing.T) {
	t.Parallel()
	const rows = 3
	pool := pgtest.NewBank(t, 6)
	addSMSRows(t, pool, rows)
	p := outbox.NewProvider(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The cut-off claim: a transaction that locked row 2, not yet ended.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT id FROM outbox WHERE id = 2 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		rep outbox.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := (&outbox.Dispatcher{DB: pool, Name: "last", SMS: p}).Final(ctx)
		done <- result{rep, err}
	}()
	// Final's claim is seen waiting for the lock in pg_locks: a drain
	// that skipped the row returns first, the lock still held.
	var holder int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for waiting := false; !waiting; {
		select {
		case res := <-done:
			t.Fatalf("Final returned (%+v, %v) while row 2 was still locked, without waiting for it: it skipped the row", res.rep, res.err)
		case <-ctx.Done():
			t.Fatalf("no claim was seen waiting for row 2's lock in pg_locks within 30s: %v", context.Cause(ctx))
		case <-tick.C:
		}
		err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid)))", holder).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
	}
	// Its backend goes: the lock with it.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waited 30s for Final to return after the lock was released")
	}
	if res.err != nil || res.rep.Outcomes[outbox.Sent] != rows {
		t.Errorf("Final: %+v, %v; want %d sent, the locked row too", res.rep, res.err, rows)
	}
	if left, err := outbox.Unsent(ctx, pool); err != nil || len(left) != 0 {
		t.Errorf("unsent after Final: %+v, %v", left, err)
	}
	checkOnce(t, ctx, pool, p, rows)
}
