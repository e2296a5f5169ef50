package scenarios

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Two copies of one request at the same moment, each on its own goroutine
// and its own pooled connection, so they truly overlap in PostgreSQL.
func init() {
	// twice sends the double tap and returns both copies' answers.
	twice := func(ctx context.Context, r *Run, h *idem.Handler, in Intent) []faults.CopyResult {
		var copies []faults.CopyResult
		dup := &faults.Duplicate{Copies: 2, Observe: func(c []faults.CopyResult) { copies = c }}
		net := r.Network(h, nil).On(dup, 1)
		r.Step("Ada taps Send twice; both requests reach the server at the same moment")
		_, _ = net.Send(ctx, faults.Delivery{Attempt: 1, Intent: in.Label,
			Request: idem.Request{UserID: in.UserID, Key: in.Key, Body: in.body()}})
		for i, c := range copies {
			r.record(in, fmt.Sprintf("copy %d", i+1), c.Response, c.Err)
		}
		return copies
	}
	protected := func(policy idem.ConflictPolicy) func(ctx context.Context, r *Run) error {
		return func(ctx context.Context, r *Run) error {
			h := r.Handler(nil)
			h.Conflict = policy
			in := r.AdaTap("ada-double-tap")
			copies := twice(ctx, r, h, in)
			fresh, other := 0, 0
			for _, c := range copies {
				switch {
				case c.Err == nil && c.Response.Status == 201 && !c.Response.Replayed:
					fresh++
				case c.Err == nil && c.Response.Status == 201 && c.Response.Replayed:
					other++
				case c.Err == nil && c.Response.Status == 409 && c.Response.Code() == idem.CodeInProgress && policy == idem.Reject409:
					other++
				}
			}
			r.Expect(fresh == 1, "exactly one copy moves the money (201)")
			if policy == idem.Reject409 {
				r.Expect(other == 1, "the other copy gets the replay, or 409 request_in_progress and a hint to retry")
			} else {
				r.Expect(other == 1, "the other copy waits for the first and gets its replay")
			}
			later, err := r.Send(ctx, r.Network(h, nil), in, 2, "later")
			r.Expect(err == nil && later.Status == 201 && later.Replayed, "a later retry gets the replay")
			r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
			r.ExpectTransfers(ctx, 1)
			return nil
		}
	}

	Register(Scenario{
		Name:    "double-tap",
		Summary: "two copies of one request at the same moment on a real connection pool",
		Phases: []Phase{{
			Title:   "without protection: a transaction, but no idempotency key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.NoKey = true
				copies := twice(ctx, r, h, r.AdaTap("ada-double-tap"))
				r.Expect(len(copies) == 2, "both copies are answered")
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection, conflict policy 409: the loser is told to retry",
			Run:   protected(idem.Reject409),
		}, {
			Title: "with protection, conflict policy wait: the loser waits for the winner's result",
			Run:   protected(idem.WaitForResult),
		}},
	})
}
