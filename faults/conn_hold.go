package faults

import (
	"context"
	"fmt"
	"time"
)

func init() { RegisterConn("hold", func() ConnFault { return &Hold{Max: 30 * time.Second} }) }

// Hold lets the server answer, then holds the answer until the client gives
// up waiting: a response slower than the client's timeout. It waits for the
// client to close the connection rather than for a fixed time, so it works
// with any client timeout; Max only bounds a client that never gives up.
type Hold struct {
	Max time.Duration `json:"max"`
}

// Name implements ConnFault.
func (*Hold) Name() string { return "hold" }

// Exchange implements ConnFault.
func (f *Hold) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	x.Note("the server answered %d %s; the answer was held until the client timed out", res.StatusCode, summarize(body))
	x.WaitForClientToGiveUp(ctx, f.Max)
	return nil
}
