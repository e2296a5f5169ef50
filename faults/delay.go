package faults

import (
	"context"
	"time"

	"github.com/banksim/bank-sim/bank"
)

func init() { Register("delay", func() Fault { return &Delay{Latency: 5 * time.Millisecond} }) }

// Delay holds the request for Latency plus up to Jitter (drawn from the run's
// seed) before it reaches the server.
type Delay struct {
	Latency time.Duration `json:"latency"`
	Jitter  time.Duration `json:"jitter"`
}

// Name implements Fault.
func (*Delay) Name() string { return "delay" }

// Deliver implements Fault.
func (f *Delay) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	wait := f.Latency
	if f.Jitter > 0 {
		wait += time.Duration(env.Int64N(int64(f.Jitter)))
	}
	select {
	case <-ctx.Done():
		return bank.Response{}, ctx.Err()
	case <-time.After(wait):
	}
	// Both can be ready by the time this goroutine runs (a loaded machine),
	// and select then picks either: a client that gave up first sends
	// nothing, whichever it picked.
	if err := ctx.Err(); err != nil {
		return bank.Response{}, err
	}
	return next(ctx, d.Request)
}
