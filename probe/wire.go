package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"
)

// maxAnswer bounds how much of an answer the probe reads: a transfer's
// answer is a few hundred bytes, and a target that streams forever must not
// hold the probe.
const maxAnswer = 1 << 20

// wireRequest is one HTTP/1.1 request, sent on a connection of its own.
type wireRequest struct {
	Method string
	// Addr is where to connect (host:port): the target, or the proxy in
	// front of it.
	Addr string
	// Host is the Host header: always the target's, also through the proxy.
	Host   string
	Target string // the request target: path and query
	Header http.Header
	Body   []byte
}

// held is a request written up to its last byte, waiting for fire: copies
// held this way and fired together complete at the server within
// microseconds of each other, which is what makes a double tap overlap
// instead of arriving one after the other.
type held struct {
	conn    net.Conn
	last    []byte
	timeout time.Duration
	stop    func() bool
	// Fired is when the last byte was written.
	Fired time.Time
}

// hold connects and writes all of req but its last byte. Every wait on the
// connection is bounded by timeout, and by ctx.
func hold(ctx context.Context, req wireRequest, timeout time.Duration) (*held, error) {
	raw, err := encode(req)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", req.Addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write(raw[:len(raw)-1]); err != nil {
		stop()
		_ = conn.Close()
		return nil, err
	}
	return &held{conn: conn, last: raw[len(raw)-1:], timeout: timeout, stop: stop}, nil
}

// fire writes the last byte: from now the request is complete at the server.
func (h *held) fire() error {
	_ = h.conn.SetDeadline(time.Now().Add(h.timeout))
	h.Fired = time.Now()
	_, err := h.conn.Write(h.last)
	return err
}

// read waits for the answer (bounded by the timeout) and closes the
// connection.
func (h *held) read() (status int, header http.Header, body []byte, err error) {
	defer h.close()
	res, err := http.ReadResponse(bufio.NewReader(h.conn), nil)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	body, err = io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return 0, nil, nil, err
	}
	return res.StatusCode, res.Header, body, nil
}

func (h *held) close() {
	h.stop()
	_ = h.conn.Close()
}

// roundTrip sends req and reads its answer.
func roundTrip(ctx context.Context, req wireRequest, timeout time.Duration) (int, http.Header, []byte, error) {
	h, err := hold(ctx, req, timeout)
	if err != nil {
		return 0, nil, nil, err
	}
	if err := h.fire(); err != nil {
		h.close()
		return 0, nil, nil, err
	}
	return h.read()
}

func encode(req wireRequest) ([]byte, error) {
	r, err := http.NewRequest(req.Method, "http://"+req.Host+req.Target, bytes.NewReader(req.Body))
	if err != nil {
		return nil, err
	}
	r.Host = req.Host
	for k, vs := range req.Header {
		r.Header[k] = vs
	}
	r.Close = true
	if r.Header.Get("User-Agent") == "" {
		r.Header.Set("User-Agent", "bank-sim-probe")
	}
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// explain is a network failure as a person reads it.
func explain(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer in time"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed without an answer"
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "no such host " + dnsErr.Name
	}
	return err.Error()
}

// endpoint is one base URL of the target, split for the wire.
type endpoint struct {
	URL    string // as given, without a trailing slash
	Addr   string // host:port to connect to
	Host   string // the Host header
	Prefix string // a path prefix of the base URL ("" or "/api")
}

func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return endpoint{}, fmt.Errorf("%q is not an http URL like http://127.0.0.1:8080", raw)
	}
	if u.Scheme == "https" {
		return endpoint{}, fmt.Errorf("%s: https is not supported: the fault proxy must see the requests to fail them, so probe the server's plain-HTTP address (e.g. http://127.0.0.1:PORT on the machine itself)", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return endpoint{}, fmt.Errorf("%q: give the server's base URL only, without a query, fragment or credentials", raw)
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	prefix := u.EscapedPath()
	for len(prefix) > 0 && prefix[len(prefix)-1] == '/' {
		prefix = prefix[:len(prefix)-1]
	}
	base := u.Scheme + "://" + u.Host + prefix
	return endpoint{URL: base, Addr: net.JoinHostPort(u.Hostname(), port), Host: u.Host, Prefix: prefix}, nil
}
