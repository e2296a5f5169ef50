package faults

import (
	"context"
	"errors"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

func init() { Register("fail-before-commit", func() Fault { return &FailBeforeCommit{} }) }

// ErrFailedBeforeCommit is the failure FailBeforeCommit injects.
var ErrFailedBeforeCommit = errors.New("the database connection broke just before COMMIT")

// FailBeforeCommit breaks the server's transaction at its last moment, after
// the transfer and the stored response and just before COMMIT: PostgreSQL
// rolls it all back, and the server answers 500. A correct server has lost
// nothing (one transaction, key released); one that stored the response in a
// second transaction has already moved the money, and one that stores its 500
// will replay it forever.
type FailBeforeCommit struct{}

// Name implements Fault.
func (*FailBeforeCommit) Name() string { return "fail-before-commit" }

// Deliver implements Fault.
func (*FailBeforeCommit) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	fired := false
	h := idem.HooksFrom(ctx)
	h.BeforeCommit = func(context.Context) error {
		fired = true
		return ErrFailedBeforeCommit
	}
	resp, err := next(idem.WithHooks(ctx, h), d.Request)
	if err != nil && fired {
		env.strike("fail-before-commit", LaneDatabase, "the connection broke just before COMMIT: that transaction rolled back, and the server answered 500")
		return idem.ServerError(), nil
	}
	return resp, err
}
