package faults

import (
	"context"
	"fmt"
	"net"
	"time"
)

func init() {
	RegisterConn("reset-after-send", func() ConnFault { return &ResetAfterSend{MaxDelay: 4 * time.Millisecond} })
}

// ResetAfterSend passes the whole request on to the server and then, a
// moment later (0 to MaxDelay, drawn from the run's seed), resets both
// connections with a TCP RST: a client whose network died, or that gave up,
// just after sending. The server is somewhere in the middle of the request
// when its connection is reset, and net/http ends the request's context.
// The client sees "connection reset by peer" and cannot know how far the
// server got.
type ResetAfterSend struct {
	MaxDelay time.Duration `json:"maxDelay"`
}

// Name implements ConnFault.
func (*ResetAfterSend) Name() string { return "reset-after-send" }

// Exchange implements ConnFault.
func (f *ResetAfterSend) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	wait := time.Duration(env.Int64N(int64(max(f.MaxDelay, 0)) + 1))
	up, err := x.Send(ctx)
	if err != nil {
		_ = x.Reset()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = up.Close()
	x.Note("the connection was reset %s after the request reached the server", wait)
	return x.Reset()
}
