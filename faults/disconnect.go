package faults

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

func init() { Register("disconnect", func() Fault { return &Disconnect{} }) }

// DisconnectPoint is where in the server's work the client goes away.
type DisconnectPoint int

// The points at which Disconnect ends the request's context.
const (
	// Anywhere draws one of the four below from the run's seed, per delivery.
	Anywhere DisconnectPoint = iota
	// BeforeClaim: the client is gone before the key's claim is sent.
	BeforeClaim
	// DuringClaim: the claim has committed, and the client goes away while
	// its answer is on the way back to the server, which then hears "context
	// canceled" instead of the answer. The dangerous one.
	DuringClaim
	// AfterClaim: the claim's answer arrived; the client goes away before
	// the transaction begins.
	AfterClaim
	// InTransaction: the client goes away inside the transaction, after the
	// transfer's checks and before its first write.
	InTransaction
)

var pointNames = [...]string{"anywhere", "before the claim", "while the claim's answer was on its way", "just after the claim", "inside the transaction"}

func (p DisconnectPoint) String() string {
	if p < 0 || int(p) >= len(pointNames) {
		return fmt.Sprintf("point %d", int(p))
	}
	return pointNames[p]
}

// Disconnect is a client that goes away mid-request: the phone loses its
// signal, the app is closed, a proxy resets the connection. The server sees
// it as its request's context ending, at the point At (drawn from the run's
// seed when Anywhere). The client sees no answer. Deliver returns only once
// the server's handler has returned, so what the handler left behind (a key
// still in progress, say) can be checked right after.
type Disconnect struct {
	At DisconnectPoint `json:"at"`
}

// Name implements Fault.
func (*Disconnect) Name() string { return "disconnect" }

// Deliver implements Fault.
func (f *Disconnect) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	at := f.At
	if at == Anywhere {
		at = DisconnectPoint(1 + env.Int64N(4))
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fired := false
	leave := func() { fired = true; cancel() }

	h := idem.HooksFrom(ctx)
	switch at {
	case BeforeClaim:
		h.BeforeClaim = chain(h.BeforeClaim, leave)
	case DuringClaim:
		prev := h.ClaimCommitted
		h.ClaimCommitted = func(cctx context.Context) error {
			if prev != nil {
				if err := prev(cctx); err != nil {
					return err
				}
			}
			leave()
			// What pgx does when the context it was given ends while the
			// answer is on its way: it reports the cancellation, although
			// PostgreSQL has committed. A server whose claim ran on a
			// context of its own hears nothing of it.
			return cctx.Err()
		}
	case AfterClaim:
		prev := h.AfterClaim
		h.AfterClaim = func(cctx context.Context, c idem.Claim) {
			if prev != nil {
				prev(cctx, c)
			}
			leave()
		}
	case InTransaction:
		rctx = bank.WithAfterChecks(rctx, leave)
	}
	resp, err := next(idem.WithHooks(rctx, h), d.Request)
	switch {
	case !fired:
		// The server never reached that point (a replay, a 409, a refused
		// body): the client stayed and heard the answer.
		return resp, err
	case err != nil:
		env.strike(f.Name(), LaneNetwork, "the client went away %s; the server gave up: %v", at, err)
	default:
		env.strike(f.Name(), LaneNetwork, "the client went away %s; the server carried on and answered %s to no one", at, resp.Summary())
	}
	return bank.Response{}, &NetworkError{Message: "the connection was lost " + at.String()}
}

func chain(prev func(context.Context), f func()) func(context.Context) {
	return func(ctx context.Context) {
		if prev != nil {
			prev(ctx)
		}
		f()
	}
}
