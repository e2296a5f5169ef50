package faults

import (
	"context"
	"runtime"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

func init() { Register("crash-after-commit", func() Fault { return &CrashAfterCommit{} }) }

// CrashAfterCommit kills the server the moment its transaction has
// committed: the money has moved and the key is completed, but nothing the
// server meant to do afterwards happens (an SMS or an event sent "after the
// commit", its answer). To the client it looks like lose-response (it cannot
// tell a dead server from a lost answer); on the server's side, what the
// transaction committed is all that is left of the request. A retry is
// replayed.
type CrashAfterCommit struct{}

// Name implements Fault.
func (*CrashAfterCommit) Name() string { return "crash-after-commit" }

// Deliver implements Fault.
func (f *CrashAfterCommit) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	died := make(chan struct{})
	h := idem.HooksFrom(ctx)
	h.AfterCommit = func(context.Context) {
		close(died)
		// A process that dies runs nothing more: no side effect, no answer.
		runtime.Goexit()
	}
	type result struct {
		resp bank.Response
		err  error
	}
	done := make(chan result, 1)
	// The server runs in a goroutine of its own, so that it can die there.
	go func() {
		resp, err := next(idem.WithHooks(ctx, h), d.Request)
		done <- result{resp, err}
	}()
	select {
	case <-died:
		env.strike(f.Name(), LaneServer, "the server committed the transfer and crashed before doing anything else: no answer, nothing it meant to do after the commit")
		return bank.Response{}, &NetworkError{Message: "connection reset: the server crashed"}
	case r := <-done:
		// Nothing committed (a replay, a refusal, an error): no crash.
		return r.resp, r.err
	case <-ctx.Done():
		return bank.Response{}, ctx.Err()
	}
}
