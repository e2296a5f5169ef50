package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// DefaultGrace is how long requests in flight may take to finish when a
// server stops, before their work is cut short.
const DefaultGrace = 10 * time.Second

// drainWait bounds the wait for handlers after their work was cut short:
// a transaction rolls back at once, and releasing the key is bounded by the
// handler's own release timeout (5 s).
const drainWait = 10 * time.Second

// Drain stops hs the way a bank must. It refuses new connections at once and
// gives the requests in flight grace to finish. If some are still running
// then, it calls stop, which must cut their work short (cancel the handler's
// Stopping context): each transaction rolls back, each key is released and
// each client is answered 503 with Retry-After. Drain returns when every
// handler has returned, which is when the database may be closed, and
// reports whether stop was needed. If a handler is still running even then,
// it says so in the error, and the caller must not close the database under
// it without saying so.
func Drain(hs *http.Server, grace time.Duration, stop func()) (cut bool, err error) {
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err = hs.Shutdown(gctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return false, err
	}
	stop()
	// Shutdown again: the listeners are closed already; this waits for the
	// connections whose handlers are returning now.
	wctx, cancel2 := context.WithTimeout(context.Background(), drainWait)
	defer cancel2()
	if err := hs.Shutdown(wctx); err != nil {
		return true, fmt.Errorf("requests were still running %s after the grace period of %s had ended and their work was cut short: %w", drainWait, grace, err)
	}
	return true, nil
}
