package scenarios

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
)

// Three dispatchers share one outbox. A claims two rows and stalls (a long
// pause) past its lease; B and C poll at the same moment. FOR UPDATE SKIP
// LOCKED makes C pass over the rows B is claiming instead of claiming them
// too; the lease lets B take A's rows over; and the claim token, checked
// before each send and at the mark, stops A, when it wakes, from sending rows
// that are B's now. Every row is sent to the provider once, and none is lost.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, w *World, protected bool) error {
		clock := r.Clock(t0)
		net := r.Network(w.Handler(clock, true, false), clock)
		r.Step("Ada makes six transfers of ₦1,000 to Bola: six SMS rows in the outbox")
		for i := 1; i <= 6; i++ {
			in := Intent{Label: fmt.Sprintf("ada-pays-bola-%d", i), UserID: 1, Key: r.Key(),
				Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000}}
			if _, err := r.SendSetup(ctx, net, in, 1, fmt.Sprintf("transfer %d", i)); err != nil {
				return err
			}
		}
		a, b, c := w.Dispatcher("A"), w.Dispatcher("B"), w.Dispatcher("C")
		for _, d := range []*outbox.Dispatcher{a, b, c} {
			d.Batch = 2
		}

		stalled, err := a.Claim(ctx)
		if err != nil {
			return err
		}
		r.Step("dispatcher A claims rows %s and stalls before it sends them (a GC pause)", rowIDs(stalled.Rows))
		r.ServerAt(laneDispatchers, "A's lease on rows %s: %s", rowIDs(stalled.Rows), Dur(outbox.DefaultLease))
		clock.Advance(31 * time.Second)

		r.Step("31 s later A's lease has expired; B and C claim at the same moment")
		bBatch, cBatch, cWaited, err := claimTogether(ctx, r, b, c)
		if err != nil {
			return err
		}
		if cWaited {
			r.Step("B claims rows %s; C waits for B's row locks, then claims rows %s too", rowIDs(bBatch.Rows), rowIDs(cBatch.Rows))
		} else {
			r.Step("B claims rows %s; C skips the rows B has locked and claims rows %s", rowIDs(bBatch.Rows), rowIDs(cBatch.Rows))
		}

		// B and C are held at their first send (a slow provider) while A
		// wakes up: A's rows are B's now, and A must find that out.
		bRun, bRelease := deliverHeld(ctx, b, bBatch)
		cRun, cRelease := deliverHeld(ctx, c, cBatch)
		for _, held := range []<-chan struct{}{bRun.held, cRun.held} {
			if _, err := waitFor(ctx, held, 10*time.Second, "B and C to reach their first send"); err != nil {
				return err
			}
		}
		r.Step("while B and C send, A wakes up and carries on with rows %s", rowIDs(stalled.Rows))
		var aSent []outbox.Row
		for _, row := range stalled.Rows {
			out, err := a.Deliver(ctx, stalled.Token, row)
			if err != nil {
				return err
			}
			if out != outbox.LostClaim {
				aSent = append(aSent, row)
			}
		}
		if len(aSent) == 0 {
			r.Step("A finds they are no longer its own, and sends nothing")
		} else {
			r.Step("A sends rows %s anyway", rowIDs(aSent))
		}
		// One after the other, so that the story is told in one order.
		for _, d := range []struct {
			release func()
			done    <-chan error
		}{{bRelease, bRun.done}, {cRelease, cRun.done}} {
			d.release()
			derr, err := waitFor(ctx, d.done, 10*time.Second, "B and C to finish their batches")
			if err = errors.Join(err, derr); err != nil {
				bRelease()
				cRelease()
				return err
			}
		}
		if _, err := b.Drain(ctx); err != nil {
			return err
		}
		sends := 0
		for _, call := range w.SMS.Calls() {
			if call.Outcome != "down" {
				sends++
			}
		}
		r.Step("B sends the rest: the provider is asked %s for 6 rows; Ada gets %s",
			plural(sends, "time", "times"), plural(len(w.SMS.MessagesTo(1)), "SMS", "SMS"))
		if protected {
			r.Expect(!cWaited && len(cBatch.Rows) == 2 && cBatch.Rows[0].ID > bBatch.Rows[len(bBatch.Rows)-1].ID,
				"C did not wait for B's locks, and B and C claimed different rows")
			r.Expect(len(aSent) == 0, "A, woken up, sent none of the rows B took over")
			r.Expect(sends == 6, "six sends for six rows")
			r.ExpectBalances(ctx, 4_400_000, 1_100_000, 2_000_000)
		} else {
			r.Expect(sends > 6, "more sends than rows: rows were sent twice")
		}
		w.Check(ctx, outbox.World{SMS: w.SMS, Dispatchers: true})
		return nil
	}

	Register(Scenario{
		Name:    "competing-dispatchers",
		Title:   "Three dispatchers, one outbox",
		Article: "Phase 4, “Build the outbox dispatcher”",
		Order:   OrderArticleOutbox,
		Summary: "three dispatchers on one outbox, one paused past its lease: SKIP LOCKED and the claim token keep every row sent once, none lost",
		Explain: Explanation{
			Shows: "Three dispatchers drain one outbox. A claims two rows and stalls (a long GC pause) " +
				"past its lease; then B and C poll at the same moment, and while they send, A wakes up " +
				"and carries on with the rows it claimed.",
			Breaks: "A plain SELECT sees the rows B is claiming as free until B commits, so C claims " +
				"them too; and A, which does not know its lease has expired, sends rows that are B's " +
				"now. Each row goes to the provider two or three times. The provider's idempotency " +
				"key may save Ada's phone, but every duplicate is a call that should not happen — and " +
				"for an event on the log, a duplicate delivered.",
			Defence: "Claim with FOR UPDATE SKIP LOCKED: a concurrent claim passes over the rows another " +
				"is locking instead of taking them too. Give each claim a lease, so rows of a " +
				"dispatcher that died are taken over, and a claim token; before each send and at the " +
				"mark a dispatcher checks the row still carries its token, and finds out it lost it.",
			SQL: "WITH candidates AS (\n" +
				"  SELECT id FROM outbox\n" +
				"   WHERE done_at IS NULL\n" +
				"     AND (claimed_until IS NULL OR claimed_until < now())\n" +
				"   ORDER BY id LIMIT 20\n" +
				"     FOR UPDATE SKIP LOCKED)\n" +
				"UPDATE outbox o SET claim_token = $1,\n" +
				"       claimed_until = now() + interval '30 seconds'\n" +
				"  FROM candidates WHERE o.id = candidates.id\n" +
				"RETURNING o.id;\n" +
				"-- every later write to a row: ... WHERE id = $2 AND claim_token = $1",
		},
		Phases: []Phase{{
			Title:   "without protection: claims without SKIP LOCKED, sends and marks without the claim token",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World().With(outbox.Flaws{NoSkipLocked: true, NoClaimToken: true}), false)
			},
		}, {
			Title: "with protection: FOR UPDATE SKIP LOCKED, a lease, and the claim token checked before each send and at the mark",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World(), true)
			},
		}},
	})
}

func rowIDs(rows []outbox.Row) string {
	if len(rows) == 0 {
		return "none"
	}
	s := ""
	for i, r := range rows {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(r.ID)
	}
	return s
}

// claimTogether stages two claims that really overlap: first's claim
// transaction stays open, its rows locked, until second's claim has run to
// its end or is waiting for first's locks; only then does first commit.
// waited reports whether second had to wait.
func claimTogether(ctx context.Context, r *Run, first, second *outbox.Dispatcher) (a, b outbox.Batch, waited bool, err error) {
	inTx, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first.Hooks.Claimed = func(context.Context, []outbox.Row) {
		once.Do(func() { close(inTx); <-proceed })
	}
	defer func() { first.Hooks.Claimed = nil }()
	type result struct {
		batch outbox.Batch
		err   error
	}
	firstDone, secondDone := make(chan result, 1), make(chan result, 1)
	go func() {
		b, err := first.Claim(ctx)
		firstDone <- result{b, err}
	}()
	if _, err := waitFor(ctx, inTx, 10*time.Second, first.Name+"'s claim to lock its rows"); err != nil {
		close(proceed)
		return a, b, false, err
	}
	go func() {
		b, err := second.Claim(ctx)
		secondDone <- result{b, err}
	}()
	var sres result
	finished := false
	deadline := time.Now().Add(10 * time.Second)
	for !finished && !waited {
		select {
		case sres = <-secondDone:
			finished = true
			continue
		case <-time.After(5 * time.Millisecond):
		}
		var n int
		if err := r.DB.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			close(proceed)
			return a, b, false, err
		}
		waited = n > 0
		if time.Now().After(deadline) {
			close(proceed)
			return a, b, false, fmt.Errorf("waited 10s for %s's claim to finish or to wait for %s's locks", second.Name, first.Name)
		}
	}
	close(proceed)
	fres, err := waitFor(ctx, firstDone, 10*time.Second, first.Name+"'s claim to commit")
	if err != nil {
		return a, b, waited, err
	}
	if !finished {
		if sres, err = waitFor(ctx, secondDone, 10*time.Second, second.Name+"'s claim to commit"); err != nil {
			return a, b, waited, err
		}
	}
	return fres.batch, sres.batch, waited, errors.Join(fres.err, sres.err)
}

// heldRun is a batch being delivered in the background.
type heldRun struct {
	held chan struct{} // closed when the first row reaches its send, or the run ends
	done chan error
}

// deliverHeld delivers batch with d in the background, stopping just before
// the first send until release is called: a slow provider. If no row gets
// that far (every claim was lost), held closes when the run ends.
func deliverHeld(ctx context.Context, d *outbox.Dispatcher, batch outbox.Batch) (heldRun, func()) {
	run := heldRun{held: make(chan struct{}), done: make(chan error, 1)}
	gate := make(chan struct{})
	var heldOnce, releaseOnce sync.Once
	d.Hooks.BeforeSend = func(context.Context, outbox.Row) {
		first := false
		heldOnce.Do(func() { first = true; close(run.held) })
		if first {
			<-gate
		}
	}
	go func() {
		var err error
		for _, row := range batch.Rows {
			if _, err = d.Deliver(ctx, batch.Token, row); err != nil {
				break
			}
		}
		heldOnce.Do(func() { close(run.held) })
		d.Hooks.BeforeSend = nil
		run.done <- err
	}()
	return run, func() { releaseOnce.Do(func() { close(gate) }) }
}
