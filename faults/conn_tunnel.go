package faults

import (
	"context"
	"fmt"
)

func init() { RegisterConn("tunnel", func() ConnFault { return &Tunnel{} }) }

// Tunnel is the lesson's bus in a tunnel, on real sockets: the request
// reaches the server, the server commits and answers, and the proxy drops the
// connection instead of passing the answer on. The client sees the
// connection close with no response, for a transfer that happened.
type Tunnel struct{}

// Name implements ConnFault.
func (*Tunnel) Name() string { return "tunnel" }

// Exchange implements ConnFault.
func (*Tunnel) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	// Reading the whole answer first is what makes this deterministic: the
	// server has committed before the client learns anything.
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	x.Note("the server answered %d %s; the connection dropped before it reached the client", res.StatusCode, summarize(body))
	return x.Drop()
}
