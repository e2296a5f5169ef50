package faults

import (
	"context"
	"time"
)

func init() {
	RegisterConn("latency", func() ConnFault { return &Latency{Latency: 5 * time.Millisecond} })
}

// Latency holds the request for Latency plus up to Jitter (drawn from the
// seed) before passing it on; the answer then arrives whole.
type Latency struct {
	Latency time.Duration `json:"latency"`
	Jitter  time.Duration `json:"jitter"`
}

// Name implements ConnFault.
func (*Latency) Name() string { return "latency" }

// Exchange implements ConnFault.
func (f *Latency) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	wait := f.Latency
	if f.Jitter > 0 {
		wait += time.Duration(env.Int64N(int64(f.Jitter)))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return x.Drop()
	case <-t.C:
	}
	return x.Forward(ctx)
}
