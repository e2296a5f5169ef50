package faults_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults"
)

// upstream is a server behind the proxy that records what reached it.
type upstream struct {
	arrived  atomic.Int32 // requests that reached the handler
	finished atomic.Int32 // handlers that returned (their answer then flushes)
	bodies   chan string
	// hold, when set, runs inside the handler before it answers.
	hold func(r *http.Request) error
}

const answer = `{"transferId":1,"from":1,"to":2,"amountKobo":1000000,"balanceKobo":4000000}`

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.arrived.Add(1)
	defer u.finished.Add(1)
	b, _ := io.ReadAll(r.Body)
	select {
	case u.bodies <- string(b):
	default:
	}
	if u.hold != nil {
		if err := u.hold(r); err != nil {
			http.Error(w, err.Error(), 599)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(201)
	_, _ = w.Write([]byte(answer))
}

// behind starts u and a proxy in front of it that applies f to every
// request; both stop when the test ends.
func behind(t *testing.T, u *upstream, f faults.ConnFault) *faults.Proxy {
	t.Helper()
	u.bodies = make(chan string, 8)
	srv := httptest.NewServer(u)
	p, err := faults.StartProxy(strings.TrimPrefix(srv.URL, "http://"), 1)
	if err != nil {
		t.Fatal(err)
	}
	p.On(f)
	t.Cleanup(func() {
		_ = p.Close()
		srv.Close()
	})
	return p
}

const requestBody = `{"from":1,"to":2,"amountKobo":1000000}`

// post sends one transfer through p with a client that gives up after
// timeout, and returns the status and body, or the error.
func post(t *testing.T, p *faults.Proxy, timeout time.Duration) (int, string, error) {
	t.Helper()
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Post(p.URL()+"/transfers", "application/json", strings.NewReader(requestBody))
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// Tunnel: the server finished (its transfer committed) before the client
// learned anything, and then the client got no answer.
func TestTunnelDropsTheAnswerAfterTheServerFinished(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	p := behind(t, u, &faults.Tunnel{})
	_, _, err := post(t, p, 5*time.Second)
	finished := u.finished.Load()
	if err == nil {
		t.Fatal("the client got an answer through the tunnel")
	}
	if finished != 1 {
		t.Fatalf("when the client saw %v, %d server handlers had finished; want 1: the answer is lost only after the server is done", err, finished)
	}
}

// Reset: the connection is reset before the request reaches the server,
// and it never does.
func TestResetNeverReachesTheServer(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	p := behind(t, u, &faults.Reset{})
	_, _, err := post(t, p, 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the client saw %v, want connection reset by peer", err)
	}
	_ = p.Close() // waits for every exchange
	if n := u.arrived.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want 0", n)
	}
}

// Hold: the server answered, and the client timed out waiting for it.
func TestHoldKeepsTheAnswerPastTheClientsTimeout(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	p := behind(t, u, &faults.Hold{Max: 10 * time.Second})
	_, _, err := post(t, p, 300*time.Millisecond)
	var te interface{ Timeout() bool }
	if !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("the client saw %v, want its own timeout", err)
	}
	if n := u.finished.Load(); n != 1 {
		t.Errorf("%d server handlers had finished when the client gave up, want 1", n)
	}
}

// Latency: the request reaches the server no sooner than the latency, and
// the answer comes back whole.
func TestLatencyDelaysTheRequest(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	var reachedAfter atomic.Int64
	start := time.Now()
	u.hold = func(*http.Request) error {
		reachedAfter.Store(int64(time.Since(start)))
		return nil
	}
	const latency = 30 * time.Millisecond
	p := behind(t, u, &faults.Latency{Latency: latency})
	status, body, err := post(t, p, 5*time.Second)
	if err != nil || status != 201 || body != answer {
		t.Fatalf("got %d %q %v, want the server's 201 whole", status, body, err)
	}
	if d := time.Duration(reachedAfter.Load()); d < latency {
		t.Errorf("the request reached the server after %s, sooner than the latency %s", d, latency)
	}
}

// Truncate: the server finished, and the client got a head and a body cut
// short, which is no answer it may act on.
func TestTruncateCutsTheBodyShort(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	p := behind(t, u, &faults.Truncate{Keep: 0.5})
	status, body, err := post(t, p, 5*time.Second)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %d %q %v, want an unexpected EOF in the body", status, body, err)
	}
	if len(body) >= len(answer) || !strings.HasPrefix(answer, body) {
		t.Errorf("the client read %q, want a strict prefix of %q", body, answer)
	}
	if n := u.finished.Load(); n != 1 {
		t.Errorf("%d server handlers finished, want 1", n)
	}
}

// Unavailable: the proxy answers 503 itself, with Retry-After, and the
// server never sees the request.
func TestUnavailableAnswersWithoutTheServer(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	p := behind(t, u, &faults.Unavailable{RetryAfter: 1})
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Post(p.URL()+"/transfers", "application/json", strings.NewReader(requestBody))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" {
		t.Errorf("got %d with Retry-After %q, want 503 with Retry-After 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
	_ = p.Close()
	if n := u.arrived.Load(); n != 0 {
		t.Errorf("%d requests reached the server, want 0", n)
	}
}

// DuplicateConn's copies are inside the server at the same moment: each
// handler waits until both have arrived, which copies sent in turn never
// do.
func TestDuplicateConnCopiesAreInFlightTogether(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	both := make(chan struct{})
	var once sync.Once
	var alone atomic.Int32
	u.hold = func(*http.Request) error {
		if u.arrived.Load() == 2 {
			once.Do(func() { close(both) })
		}
		select {
		case <-both:
			return nil
		case <-time.After(inFlightBound):
			alone.Add(1)
			return fmt.Errorf("a copy waited %s in the server for the other: they were not in flight together", inFlightBound)
		}
	}
	p := behind(t, u, &faults.DuplicateConn{Copies: 2})
	status, body, err := post(t, p, 3*inFlightBound)
	if err != nil || status != 201 {
		t.Fatalf("the client got %d %q %v, want the first copy's 201", status, body, err)
	}
	_ = p.Close() // waits for both copies
	if n := u.arrived.Load(); n != 2 {
		t.Errorf("%d copies reached the server, want 2", n)
	}
	if n := alone.Load(); n != 0 {
		t.Errorf("%d copies waited in vain for the other: they were sent one after the other", n)
	}
}

// ResetAfterSend: the whole request reached the server, then both
// connections were reset: the server, in the middle of the request, sees its
// context end, and the client cannot know how far the server got.
func TestResetAfterSendDeliversThenResets(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	ended := make(chan bool, 1)
	u.hold = func(r *http.Request) error {
		select {
		case <-r.Context().Done():
			ended <- true
		case <-time.After(5 * time.Second):
			ended <- false
		}
		return nil
	}
	p := behind(t, u, &faults.ResetAfterSend{MaxDelay: 4 * time.Millisecond})
	_, _, err := post(t, p, 5*time.Second)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the client saw %v, want connection reset by peer", err)
	}
	select {
	case b := <-u.bodies:
		if b != requestBody {
			t.Errorf("the server got body %q, want the whole request %q", b, requestBody)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the server within 5 s")
	}
	if !<-ended {
		t.Error("the server's request context did not end within 5 s of the reset")
	}
}

// HalfClose: the client closes its sending side after the whole request;
// the server sees its request's context end (the client "went away") and
// must still answer, and the client gets that answer.
func TestHalfCloseEndsTheRequestContextButGetsTheAnswer(t *testing.T) {
	t.Parallel()
	u := &upstream{}
	u.hold = func(r *http.Request) error {
		select {
		case <-r.Context().Done():
			return nil
		case <-time.After(5 * time.Second):
			return fmt.Errorf("the request's context did not end within 5 s of the half-close")
		}
	}
	p := behind(t, u, &faults.HalfClose{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", p.URL()+"/transfers", strings.NewReader(requestBody))
	res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 201 || string(b) != answer {
		t.Errorf("the client got %d %q, want the server's 201 (given after its context ended)", res.StatusCode, b)
	}
}
