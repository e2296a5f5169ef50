package faults

import "context"

func init() { RegisterConn("reset", func() ConnFault { return &Reset{} }) }

// Reset aborts the connection with a TCP RST before the request reaches the
// server. The client sees "connection reset by peer" and, like any network
// error, cannot know that nothing happened; here, nothing did.
type Reset struct{}

// Name implements ConnFault.
func (*Reset) Name() string { return "reset" }

// Exchange implements ConnFault.
func (*Reset) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	x.Note("the connection was reset before the request reached the server")
	return x.Reset()
}
