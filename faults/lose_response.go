package faults

import (
	"context"

	"github.com/banksim/bank-sim/bank"
)

func init() { Register("lose-response", func() Fault { return &LoseResponse{} }) }

// LoseResponse lets the server finish, then loses its answer: the bus has
// driven into a tunnel. The client sees a timeout for a request that succeeded.
type LoseResponse struct{}

// Name implements Fault.
func (*LoseResponse) Name() string { return "lose-response" }

// Deliver implements Fault.
func (*LoseResponse) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	resp, err := next(ctx, d.Request)
	if err == nil {
		env.strike("lose-response", LaneNetwork, "the server answered %s; the answer was lost on the way back", resp.Summary())
	}
	return bank.Response{}, &NetworkError{Message: "timed out waiting for the response"}
}
