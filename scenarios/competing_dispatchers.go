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
		r.Step("Ada makes six transfers of ₦1,000 to Bola; each commits an SMS row in the outbox")
		for i := 1; i <= 6; i++ {
			in := Intent{Label: fmt.Sprintf("ada-pays-bola-%d", i), UserID: 1, Key: r.Key(),
				Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000}}
			if _, err := r.SendWithRetries(ctx, net, in, 1); err != nil {
				return err
			}
		}
		a, b, c := w.Dispatcher("A"), w.Dispatcher("B"), w.Dispatcher("C")
		for _, d := range []*outbox.Dispatcher{a, b, c} {
			d.Batch = 2
		}

		r.Step("dispatcher A claims a batch and stalls before sending it (a long GC pause)")
		stalled, err := a.Claim(ctx)
		if err != nil {
			return err
		}
		r.Server("A holds rows %s, its lease %s", rowIDs(stalled.Rows), outbox.DefaultLease)
		clock.Advance(31 * time.Second)

		r.Step("31 s later A's lease has expired; B and C poll the outbox at the same moment")
		bBatch, cBatch, cWaited, err := claimTogether(ctx, r, b, c)
		if err != nil {
			return err
		}
		if cWaited {
			r.Server("C's claim waited for B's row locks, then took the rows it had read as free")
		} else {
			r.Server("C's claim did not wait: SKIP LOCKED passed over the rows B was claiming")
		}
		r.Server("B holds rows %s, C holds rows %s", rowIDs(bBatch.Rows), rowIDs(cBatch.Rows))

		r.Step("B and C start sending; the provider is slow to answer their first SMS")
		bRun, bRelease := deliverHeld(ctx, b, bBatch)
		cRun, cRelease := deliverHeld(ctx, c, cBatch)
		for _, held := range []<-chan struct{}{bRun.held, cRun.held} {
			if _, err := waitFor(ctx, held, 10*time.Second, "B and C to reach their first send"); err != nil {
				return err
			}
		}
		r.Step("A wakes up and carries on with its batch")
		for _, row := range stalled.Rows {
			if _, err := a.Deliver(ctx, stalled.Token, row); err != nil {
				return err
			}
		}
		bRelease()
		cRelease()
		for _, done := range []<-chan error{bRun.done, cRun.done} {
			derr, err := waitFor(ctx, done, 10*time.Second, "B and C to finish their batches")
			if err = errors.Join(err, derr); err != nil {
				return err
			}
		}
		r.Step("B drains what is left")
		if _, err := b.Drain(ctx); err != nil {
			return err
		}
		sends := 0
		for _, call := range w.SMS.Calls() {
			if call.Outcome != "down" {
				sends++
			}
		}
		r.Server("the provider was asked %d times; Ada's phone has %d SMS", sends, len(w.SMS.Messages()))
		if protected {
			r.Expect(len(cBatch.Rows) == 2 && cBatch.Rows[0].ID > bBatch.Rows[len(bBatch.Rows)-1].ID,
				"B and C claimed different rows")
			r.Expect(sends == 6, "six sends for six rows: A sent nothing that was B's")
			r.ExpectBalances(ctx, 4_400_000, 1_100_000, 2_000_000)
		} else {
			r.Expect(sends > 6, "more sends than rows: rows were sent twice")
		}
		w.Check(ctx, outbox.World{SMS: w.SMS, Dispatchers: true})
		return nil
	}

	Register(Scenario{
		Name:    "competing-dispatchers",
		Summary: "three dispatchers on one outbox, one paused past its lease: SKIP LOCKED and the claim token keep every row sent once, none lost",
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
