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
	"os"
	"time"

	"github.com/banksim/bank-sim/faults"
)

// The probe's connection faults. They do what faults.Tunnel and a client
// timeout do, and also report to the probe what the server answered, which
// the client never sees: that is the evidence a black-box run needs ("the
// server answered 201 transferId 7; the client got nothing").

// proxySaw is what a fault saw on the server's side.
type proxySaw struct {
	answer *Answer // the server's answer, when it came
	hungUp bool    // the connection to the server was closed before it
	after  time.Duration
	err    error
}

// loseAnswer is the lesson's tunnel: the request reaches the server, the
// server answers, and the answer is dropped on its way back.
type loseAnswer struct {
	contract Contract
	saw      chan proxySaw
}

func newLoseAnswer(c Contract) *loseAnswer {
	return &loseAnswer{contract: c, saw: make(chan proxySaw, 1)}
}

// Name implements faults.ConnFault.
func (*loseAnswer) Name() string { return "lose-answer" }

// Exchange implements faults.ConnFault.
func (f *loseAnswer) Exchange(ctx context.Context, _ *faults.Env, x *faults.Exchange) error {
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		f.saw <- proxySaw{err: err}
		return x.Drop()
	}
	// Reported before the drop, so the probe knows it once the client sees
	// its connection close.
	f.saw <- proxySaw{answer: f.contract.read(res.StatusCode, res.Header, body)}
	return x.Drop()
}

// hangUp is a client that gives up mid-request: the request reaches the
// server whole, and After later, before the answer, the connection to the
// server is closed (with a reset when Reset is set, as a phone that lost its
// signal; a plain close otherwise, as a client's timeout). The client sees
// its own connection drop. If the server answers first, the answer is kept.
type hangUp struct {
	contract Contract
	addr     string // the server's, dialled directly for exact timing
	After    time.Duration
	Reset    bool
	saw      chan proxySaw
}

func newHangUp(c Contract, addr string, after time.Duration, reset bool) *hangUp {
	return &hangUp{contract: c, addr: addr, After: after, Reset: reset, saw: make(chan proxySaw, 1)}
}

// Name implements faults.ConnFault.
func (*hangUp) Name() string { return "hang-up" }

// Exchange implements faults.ConnFault. The clock starts when the whole
// request has been written to the server, not when the client sent it, so
// After is time the server had.
func (f *hangUp) Exchange(ctx context.Context, _ *faults.Env, x *faults.Exchange) error {
	saw := proxySaw{}
	defer func() {
		f.saw <- saw
		_ = x.Drop()
	}()
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.DialContext(ctx, "tcp", f.addr)
	if err != nil {
		saw.err = err
		return err
	}
	defer up.Close()
	req := x.Request
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	req.ContentLength = int64(len(x.Body))
	req.TransferEncoding = nil
	req.Close = true
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		saw.err = err
		return err
	}
	if _, err := up.Write(raw.Bytes()); err != nil {
		saw.err = err
		return err
	}
	sent := time.Now()
	_ = up.SetReadDeadline(sent.Add(f.After))
	res, err := readAnswer(up)
	if err == nil {
		saw.answer = f.contract.read(res.status, res.header, res.body)
		saw.after = time.Since(sent)
		return nil
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		saw.err = err
		return err
	}
	saw.hungUp, saw.after = true, time.Since(sent)
	if tc, ok := up.(*net.TCPConn); ok && f.Reset {
		_ = tc.SetLinger(0)
	}
	return up.Close()
}

type rawAnswer struct {
	status int
	header map[string][]string
	body   []byte
}

func readAnswer(conn net.Conn) (*rawAnswer, error) {
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return nil, err
	}
	return &rawAnswer{status: res.StatusCode, header: res.Header, body: body}, nil
}

// wait returns what the fault saw, once it has seen it (bounded: the fault
// always reports, but a probe must never hang on a mistake of its own).
func waitSaw(ch chan proxySaw, limit time.Duration) (proxySaw, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case s := <-ch:
		return s, nil
	case <-t.C:
		return proxySaw{}, fmt.Errorf("the proxy did not report within %s", limit)
	}
}

// describe is what the proxy saw, as evidence.
func (s proxySaw) describe() string {
	switch {
	case s.err != nil:
		return "the proxy could not reach the server: " + explain(s.err)
	case s.hungUp:
		return fmt.Sprintf("the client hung up %s after the request reached the server, before any answer", s.after.Round(10*time.Microsecond))
	case s.answer != nil:
		return "the server answered " + s.answer.String() + "; the answer was dropped on its way back"
	}
	return "nothing"
}

// newReset is faults' own reset: the connection is aborted before the
// request reaches the server.
func newReset() (faults.ConnFault, error) { return faults.NewConn("reset") }
