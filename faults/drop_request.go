package faults

import (
	"context"

	"github.com/banksim/bank-sim/bank"
)

func init() { Register("drop-request", func() Fault { return &DropRequest{} }) }

// DropRequest loses the request before it reaches the server. To the client
// this looks exactly like LoseResponse, which is the whole problem.
type DropRequest struct{}

// Name implements Fault.
func (*DropRequest) Name() string { return "drop-request" }

// Deliver implements Fault.
func (*DropRequest) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	env.strike("drop-request", LaneNetwork, "the request never reached the server")
	return bank.Response{}, &NetworkError{Message: "timed out waiting for the response"}
}
