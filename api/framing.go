package api

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Request framing. net/http reads a request that has both Content-Length
// and Transfer-Encoding as chunked, and two equal Content-Lengths as one,
// and deletes the evidence before a handler runs. A proxy in front may read
// the same bytes the other way (RFC 9112 §6.1, §11.2): the body as one
// proxy sees it hides a second request that this server executes, a
// transfer nobody checked. So the connection's bytes are watched as they
// are read, and a request framed two ways is refused with 400 and its
// connection closed: nothing sent after it on that connection runs.

// CodeAmbiguousFraming is the code of a request whose framing two parsers
// could read two ways.
const CodeAmbiguousFraming = "ambiguous_framing"

// Serve serves hs on ln as bank-sim serves the API: through Listener and
// ConnContext, so that the API refuses a request framed two ways.
func Serve(hs *http.Server, ln net.Listener) error {
	prev := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		return ConnContext(ctx, c)
	}
	return hs.Serve(Listener(ln))
}

// Listener wraps ln so that each connection watches the header blocks it
// reads. Give its connections to the API's handler with ConnContext (as
// http.Server.ConnContext), or use Serve.
func Listener(ln net.Listener) net.Listener { return &framingListener{ln} }

// ConnContext is an http.Server's ConnContext for connections of Listener.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

type framingKey struct{}

type framingListener struct{ net.Listener }

func (l *framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c}, nil
}

// framedConn reads through, and scans every line for the framing headers.
// A header block is the lines up to an empty one; each real header line is
// a whole line of the stream, so both framing headers of one request fall
// in one block, whatever came before them on the connection. (A body can
// only add lines, never split a header block: at worst the attacker's own
// connection is refused.)
type framedConn struct {
	net.Conn

	mu     sync.Mutex
	line   []byte // the start of the current line, enough to name its header
	long   bool   // the current line is longer than line keeps
	cl, te int    // Content-Length and Transfer-Encoding lines in the block
	bad    string // why the connection's framing is ambiguous, once it is
}

// maxName is how much of a line is kept: the longest name looked for, and
// its colon.
const maxName = len("transfer-encoding:")

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	return n, err
}

func (c *framedConn) scan(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range b {
		if ch != '\n' {
			if len(c.line) < maxName {
				c.line = append(c.line, ch)
			} else {
				c.long = true
			}
			continue
		}
		line := bytes.TrimSuffix(c.line, []byte("\r"))
		switch {
		case len(line) == 0 && !c.long:
			c.endBlock()
		case hasName(line, "content-length:"):
			c.cl++
		case hasName(line, "transfer-encoding:"):
			c.te++
		}
		c.line, c.long = c.line[:0], false
	}
}

func hasName(line []byte, name string) bool {
	return len(line) >= len(name) && bytes.EqualFold(line[:len(name)], []byte(name))
}

func (c *framedConn) endBlock() {
	if c.bad == "" {
		switch {
		case c.cl > 0 && c.te > 0:
			c.bad = "This request has both Content-Length and Transfer-Encoding: its body can be read two ways (RFC 9112 §6.1). Send one of them"
		case c.cl > 1:
			c.bad = fmt.Sprintf("Send the Content-Length header once; this request has %d", c.cl)
		case c.te > 1:
			c.bad = fmt.Sprintf("Send the Transfer-Encoding header once; this request has %d", c.te)
		}
	}
	c.cl, c.te = 0, 0
}

// ambiguous says why r must be refused before anything reads it, or "":
// its connection's framing could be read two ways, or it repeats a header
// whose copies two parsers could pick differently.
func ambiguous(r *http.Request) (Problem, bool) {
	if fc, ok := r.Context().Value(framingKey{}).(*framedConn); ok {
		fc.mu.Lock()
		bad := fc.bad
		fc.mu.Unlock()
		if bad != "" {
			return newProblem(400, CodeAmbiguousFraming, bad), true
		}
	}
	for _, h := range []string{"Content-Length", "Transfer-Encoding", "Content-Type", "Authorization", HeaderKey} {
		if p, dup := duplicated(r, h); dup {
			return p, true
		}
	}
	return Problem{}, false
}

// strict refuses an ambiguous request with 400 and closes its connection:
// whatever follows it on the connection was framed by a reading this
// server does not share.
func strict(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, bad := ambiguous(r); bad {
			w.Header().Set("Connection", "close")
			writeProblem(w, p)
			return
		}
		next.ServeHTTP(w, r)
	})
}
