package faults

import (
	"context"

	"github.com/banksim/bank-sim/bank"
)

func init() { Register("crash-after-commit", func() Fault { return &CrashAfterCommit{} }) }

// CrashAfterCommit lets the server do its work and commit, and then kills it
// before it can answer: the client times out on a request whose transaction
// committed. To the client it is lose-response again (it cannot tell a dead
// server from a lost answer); on the server's side nothing answered at all,
// and what the transaction committed — the transfer and, on a correct
// server, its stored answer — is all that is left of the request.
type CrashAfterCommit struct{}

// Name implements Fault.
func (*CrashAfterCommit) Name() string { return "crash-after-commit" }

// Deliver implements Fault.
func (f *CrashAfterCommit) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	resp, err := next(ctx, d.Request)
	if err == nil {
		env.strike(f.Name(), LaneServer, "the server committed (%s) and crashed before it could answer", resp.Summary())
	} else {
		env.strike(f.Name(), LaneServer, "the server crashed before it could answer")
	}
	return bank.Response{}, &NetworkError{Message: "timed out waiting for the response"}
}
