package scenarios

import (
	"context"
	"errors"
	"time"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Server A claims the key and goes silent. A retry 10 s later is told to
// wait; one at 31 s finds the lock expired, takes the key over and makes the
// transfer. Then A wakes up and tries to finish.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, flaws idem.Flaws, protected bool) error {
		clock := r.Clock(t0)
		h := r.Handler(clock)
		h.Store.Flaws = flaws
		crash := &faults.CrashAfterClaim{}
		r.Defer(crash.KillAll)
		net := r.Network(h, clock).On(crash, 1)
		in := Intent{Label: "ada-crash", UserID: 1, Key: "crash-demo-00000000001",
			Request: AdaPaysBola}

		r.Step("Ada sends ₦10,000; server A claims the key and goes silent")
		_, err := r.Send(ctx, net, in, 1, "")
		sleepers := crash.Sleepers()
		if !r.Expect(err != nil && len(sleepers) == 1, "server A is stuck holding the key") {
			return nil
		}
		clock.Advance(10 * time.Second)
		early, _ := r.Send(ctx, net, in, 2, "retry after 10 s")
		clock.Advance(21 * time.Second)
		late, _ := r.Send(ctx, net, in, 3, "retry after 31 s")

		r.Step("server A wakes up and tries to finish its transfer")
		_, aerr := sleepers[0].Wake()
		if aerr != nil {
			r.Server("server A: %v", errors.Unwrap(aerr))
		} else {
			r.Server("server A committed its transfer too")
		}
		if protected {
			r.Expect(early.Status == 409 && early.Code() == idem.CodeInProgress, "after 10 s: 409 request_in_progress")
			r.Expect(late.Status == 201 && !late.Replayed, "after 31 s: the lock has expired; the retry takes over and transfers")
			r.Expect(errors.Is(aerr, idem.ErrLostLock), "server A fails the fencing check and rolls back")
			r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
			r.ExpectTransfers(ctx, 1)
		}
		return nil
	}

	Register(Scenario{
		Name:    "crash-takeover",
		Summary: "a server claims the key and goes silent; a retry takes over after the 30 s lock; fencing stops the late server",
		Phases: []Phase{{
			Title:   "without protection: a lock that expires, but no fencing token",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, idem.Flaws{NoFencing: true}, false)
			},
		}, {
			Title: "with protection: lock expiry plus a fencing token checked at completion",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, idem.Flaws{}, true)
			},
		}},
	})
}
