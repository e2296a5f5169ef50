package api_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// liveServer serves the API for h on a real loopback socket and counts the
// handlers running, so a test can wait until every one has returned.
type liveServer struct {
	url     string
	addr    string
	running atomic.Int64
	srv     *http.Server
}

func serveLive(t *testing.T, h *idem.Handler) *liveServer {
	t.Helper()
	return serveLiveWith(t, h, nil)
}

// serveLiveWith is serveLive with before, when not nil, run on every request
// before the API sees it.
func serveLiveWith(t *testing.T, h *idem.Handler, before func(*http.Request) *http.Request) *liveServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls := &liveServer{url: "http://" + ln.Addr().String(), addr: ln.Addr().String()}
	apiH := api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens()})
	ls.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ls.running.Add(1)
		defer ls.running.Add(-1)
		if before != nil {
			r = before(r)
		}
		apiH.ServeHTTP(w, r)
	})}
	go func() { _ = ls.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ls.srv.Shutdown(ctx)
	})
	return ls
}

// waitIdle returns once every request the server accepted has been
// handled: it shuts the server down gracefully, which closes the listener
// and waits for each accepted connection, one whose handler has not
// started yet included. Counting running handlers instead raced with
// requests still on their way to their handler: on a loaded machine 650 of
// 1,500 keys were "left in progress" by handlers that had not yet run.
func (ls *liveServer) waitIdle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := ls.srv.Shutdown(ctx); err != nil {
		t.Fatalf("waited 3 minutes for the server's handlers to return (%v); %d still running", err, ls.running.Load())
	}
	if n := ls.running.Load(); n != 0 {
		t.Fatalf("the server shut down with %d handlers still running", n)
	}
}

func inProgress(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(),
		"SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// resetProbe sends n valid POSTs through a proxy that resets each connection
// 0–4 ms (seeded by seed) after passing the request on, waits until every handler has
// returned, and counts the keys left in progress: keys with nobody working on
// them, which block every retry with 409 until their lock expires.
func resetProbe(t *testing.T, mistake bool, n int, seed uint64) (stuck int) {
	t.Helper()
	pool := newBank(t, 16)
	// The probe is about clients going away, not about an overloaded
	// server: on a machine at load 30, 1,500 requests on 16 connections
	// outlasted the default 20 s of work, and keys whose release then also
	// timed out were counted as stuck. Nothing takes over a key here, so a
	// long bound costs nothing.
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, ClaimOnRequestContext: mistake, WorkTimeout: 2 * time.Minute}
	ls := serveLive(t, h)
	p, err := faults.StartProxy(ls.addr, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.On(&faults.ResetAfterSend{MaxDelay: 4 * time.Millisecond})

	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var next atomic.Int64
	var answered atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				req, _ := http.NewRequest("POST", p.URL()+"/transfers", strings.NewReader(`{"from":11,"to":21,"amountKobo":100}`))
				req.Header.Set("Authorization", "Bearer token-ada")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(api.HeaderKey, fmt.Sprintf("probe-reset-%08d", i))
				if res, err := httpc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
					answered.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := p.Fired()["reset-after-send"]; got != n {
		t.Fatalf("the reset fired %d times for %d requests", got, n)
	}
	if a := answered.Load(); a != 0 {
		t.Fatalf("%d of %d reset requests were answered; the reset never reached the client", a, n)
	}
	ls.waitIdle(t)
	return inProgress(t, pool)
}

// Defect 1 of issue 7: a client that goes away just after sending its
// request must not leave its key in progress with nobody working on it.
// Measured on the real server: 500 valid POSTs (1,500 exhaustive), each
// connection reset 0–4 ms after the request reached the server.
func TestResetAfterSendLeavesNoKeyInProgress(t *testing.T) {
	t.Parallel()
	n := resets()
	if stuck := resetProbe(t, false, n, 2026); stuck != 0 {
		t.Errorf("%d of %d keys left in progress after every handler returned, want 0", stuck, n)
	}
}

// The same probe against the named mistake (claim on the request's context)
// must find stuck keys: it is what proves the probe can see the defect
// (52 of 1,500 here, about 17 expected of 500). Whether a reset lands
// between the claim's commit and the key's completion is timing: at load
// 25, six probes of 500 left 14, 17, 30, 9, 0 and 11 keys, so the mistake
// must show in one of three probes (seeds 2026-2028), not in the first.
func TestResetAfterSendFindsTheClaimOnRequestContextMistake(t *testing.T) {
	t.Parallel()
	n := resets()
	for seed := uint64(2026); seed <= 2028; seed++ {
		stuck := resetProbe(t, true, n, seed)
		t.Logf("claim-on-request-context, seed %d: %d of %d keys left in progress", seed, stuck, n)
		if stuck > 0 {
			return
		}
	}
	t.Errorf("no key left in progress by the claim-on-request-context mistake in three probes of %d resets; the probe does not reach the claim", n)
}

// resets is how many requests the reset probes send: every reset forks a
// PostgreSQL backend again for the connection its cancelled query closed
// (25 ms of CPU each), which made these two tests most of api's CPU.
func resets() int {
	if pgtest.IsExhaustive() {
		return 1500
	}
	return 500
}

// halfClosed sends one complete POST on a raw connection, then closes its
// side for writing (shutdown(SHUT_WR)), and reads the answer.
func halfClosed(t *testing.T, addr, key string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"from":11,"to":21,"amountKobo":1000000}`
	fmt.Fprintf(c, "POST /transfers HTTP/1.1\r\nHost: bank\r\nAuthorization: Bearer token-ada\r\nContent-Type: application/json\r\n"+
		"Idempotency-Key: %s\r\nContent-Length: %d\r\n\r\n%s", key, len(body), body)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a half-closed request: %v", err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

// A client that half-closes its connection after a complete request is
// answered: net/http ends the request's context at the end of the stream,
// and the handler's work does not run on it.
func TestHalfClosedRequestIsAnswered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mistake bool
		status  int
	}{
		{"correct handler: 201", false, 201},
		{"claim-on-request-context: 500", true, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, 4)
			var ended atomic.Bool
			ls := serveLiveWith(t, &idem.Handler{DB: pool, Store: &idem.Store{}, ClaimOnRequestContext: tc.mistake}, func(r *http.Request) *http.Request {
				ended.Store(afterHangUp(r))
				return r
			})
			res := halfClosed(t, ls.addr, "half-close-000000000001")
			if !ended.Load() {
				t.Fatalf("net/http did not end the request's context within 10 s of the client's half-close")
			}
			if res.StatusCode != tc.status {
				t.Errorf("half-closed request answered %d, want %d", res.StatusCode, tc.status)
			}
			ls.waitIdle(t)
			keys, transfers := counts(t, pool)
			if stuck := inProgress(t, pool); stuck != 0 {
				t.Errorf("%d keys left in progress", stuck)
			}
			if tc.status == 201 && (keys != 1 || transfers != 1) {
				t.Errorf("%d keys and %d transfers, want 1 and 1", keys, transfers)
			}
			if tc.status == 500 && transfers != 0 {
				t.Errorf("%d transfers after a 500", transfers)
			}
		})
	}
}

// afterHangUp reads the request's body and then waits, at most 10 s, for
// net/http to see the client's half-close and end the request's context; it
// says whether it did. net/http only reads past a body once the body has
// been read to its end, so the body is read here and put back. Without the
// wait the handler could claim its key before net/http saw the end of the
// stream, and the mistake's 500 depended on the machine's load (answered 201
// on a busy machine).
func afterHangUp(r *http.Request) bool {
	body, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return false
	}
	select {
	case <-r.Context().Done():
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// The HalfClose connection fault does to the server what such a client does:
// the client behind the proxy is answered 201, and the transfer happened once.
func TestHalfCloseFaultThroughTheProxy(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 4)
	ls := serveLive(t, &idem.Handler{DB: pool, Store: &idem.Store{}})
	p, err := faults.StartProxy(ls.addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.On(&faults.HalfClose{})
	a := do(t, "POST", p.URL()+"/transfers", post("token-ada", "half-close-proxy-000001"), `{"from":11,"to":21,"amountKobo":1000000}`)
	if a.status != 201 {
		t.Fatalf("through a half-closing proxy: %d %s, want 201", a.status, a.body)
	}
	if _, transfers := counts(t, pool); transfers != 1 {
		t.Errorf("%d transfers, want 1", transfers)
	}
}
