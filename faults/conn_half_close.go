package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
)

func init() { RegisterConn("half-close", func() ConnFault { return &HalfClose{} }) }

// HalfClose passes the whole request on to the server and then closes its
// side of the connection for writing (shutdown(SHUT_WR)), as some clients
// and proxies do once they have nothing more to send; it still reads the
// answer and passes it on. The request is complete, so the server owes it an
// answer; but net/http reads the end of the stream as the client going away
// and ends the request's context.
type HalfClose struct{}

// Name implements ConnFault.
func (*HalfClose) Name() string { return "half-close" }

// Exchange implements ConnFault.
func (*HalfClose) Exchange(ctx context.Context, env *Env, x *Exchange) error {
	up, err := x.Send(ctx)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("the server could not be reached: %w", err)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { _ = up.Close() })
	defer stop()
	if tc, ok := up.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	res, err := http.ReadResponse(bufio.NewReader(up), x.Request)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("after the half-close the server did not answer: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		_ = x.Drop()
		return fmt.Errorf("after the half-close the answer broke off: %w", err)
	}
	x.Note("the client half-closed its connection after the request; the server answered %d %s", res.StatusCode, summarize(body))
	return x.Reply(res, body)
}
