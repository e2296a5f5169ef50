package faults

import (
	"context"
	"fmt"
)

func init() { RegisterConn("truncate", func() ConnFault { return &Truncate{Keep: 0.5} }) }

// Truncate passes the server's answer on but cuts its body short (Keep is
// the fraction sent) while the head still announces the full length. The
// client gets a status line and then an unexpected EOF: not an answer it may
// act on, so a network error, although the server finished.
type Truncate struct {
	Keep float64 `json:"keep"`
}

// Name implements ConnFault.
func (*Truncate) Name() string { return "truncate" }

// Exchange implements ConnFault.
func (f *Truncate) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	keep := int(float64(len(body)) * f.Keep)
	if keep >= len(body) && len(body) > 0 {
		keep = len(body) - 1 // always cut at least one byte, or nothing failed
	}
	x.Note("the server answered %d %s; the body was cut after %d of %d bytes", res.StatusCode, summarize(body), keep, len(body))
	return x.ReplyPartial(res, body, keep)
}
