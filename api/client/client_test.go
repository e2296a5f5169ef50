package client_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
)

// answering is a server that gives every POST the same answer and records
// the attempt numbers it saw.
type answering struct {
	status     int
	retryAfter string
	body       string
	mu         sync.Mutex
	attempts   []int
}

func (a *answering) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.Header.Get(api.HeaderAttempt))
	a.mu.Lock()
	a.attempts = append(a.attempts, n)
	a.mu.Unlock()
	if a.retryAfter != "" {
		w.Header().Set(api.HeaderRetryAfter, a.retryAfter)
	}
	w.Header().Set("Content-Type", api.ProblemType)
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.body))
}

const problem503 = `{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable"}`

// backoff is a client's backoff settings.
type backoff struct {
	attempts                   int
	base, limit, maxRetryAfter time.Duration
}

// waits runs one intent against srv with a client whose jitter comes from
// seed, and returns the wait the client chose after each attempt.
func waits(t *testing.T, url string, seed uint64, b backoff) []time.Duration {
	t.Helper()
	var got []time.Duration
	c := &client.Client{URLs: []string{url}, Token: "token-ada", Attempts: b.attempts,
		BaseDelay: b.base, MaxDelay: b.limit, MaxRetryAfter: b.maxRetryAfter,
		Rand: rand.New(rand.NewPCG(seed, 1)),
		Sleep: func(_ context.Context, d time.Duration) error {
			got = append(got, d)
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Send(ctx, client.Intent{Key: "jitter-test-000000001", Transfer: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}})
	if err != nil || out.Kind != client.Unknown {
		t.Fatalf("Send: %v %v, want an unknown outcome after every attempt got 503", out.Kind, err)
	}
	return got
}

// The backoff after attempt n is BaseDelay·2^(n-1) capped at MaxDelay, plus
// a jitter in [0, BaseDelay): in that range, in that unit, and still spread
// once the cap is reached, so that clients that failed together do not
// retry together.
func TestBackoffJitterRangeUnitAndSpreadAtTheCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&answering{status: 503, body: problem503})
	defer srv.Close()
	const base, limit, attempts = 10 * time.Millisecond, 40 * time.Millisecond, 7
	cfg := backoff{attempts: attempts, base: base, limit: limit}
	byAttempt := make([][]time.Duration, attempts-1)
	for seed := range uint64(100) {
		w := waits(t, srv.URL, seed, cfg)
		if len(w) != attempts-1 {
			t.Fatalf("seed %d: %d waits, want %d (one after every attempt but the last)", seed, len(w), attempts-1)
		}
		for n, d := range w {
			byAttempt[n] = append(byAttempt[n], d)
		}
	}
	for i, ws := range byAttempt {
		n := i + 1
		exp := min(base<<(n-1), limit)
		lo, hi := slices.Min(ws), slices.Max(ws)
		if lo < exp || hi >= exp+base {
			t.Errorf("after attempt %d: waits from %s to %s, want each in [%s, %s)", n, lo, hi, exp, exp+base)
		}
		// 100 draws from [0, 10 ms) spread far wider than 5 ms, unless the
		// jitter is gone or drawn in the wrong unit.
		if hi-lo < base/2 {
			t.Errorf("after attempt %d (backoff %s%s): 100 clients' waits all within %s of each other: they retry in lockstep",
				n, exp, map[bool]string{true: ", at the cap", false: ""}[exp == limit], hi-lo)
		}
	}
}

// Retry-After is honoured when longer than the backoff, up to MaxRetryAfter.
func TestRetryAfterIsHonouredUpToItsCap(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&answering{status: 409, retryAfter: "2", body: `{"type":"about:blank","title":"Conflict","status":409,"code":"request_in_progress"}`})
	defer srv.Close()
	w := waits(t, srv.URL, 1, backoff{attempts: 3, base: time.Millisecond, limit: 4 * time.Millisecond, maxRetryAfter: 1500 * time.Millisecond})
	if want := []time.Duration{1500 * time.Millisecond, 1500 * time.Millisecond}; !slices.Equal(w, want) {
		t.Errorf("waits %v, want %v (Retry-After 2 s capped at 1.5 s, longer than the backoff)", w, want)
	}
}

// A client that resumes an intent numbers its attempts on from FirstAttempt,
// and keeps each answer's bytes as they arrived.
func TestFirstAttemptAndRawBody(t *testing.T) {
	t.Parallel()
	a := &answering{status: 503, body: problem503}
	srv := httptest.NewServer(a)
	defer srv.Close()
	var raw [][]byte
	c := &client.Client{URLs: []string{srv.URL}, Token: "token-ada", Attempts: 3, FirstAttempt: 5,
		Sleep:     func(context.Context, time.Duration) error { return nil },
		OnAttempt: func(at client.Attempt) { raw = append(raw, at.Raw) }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Send(ctx, client.Intent{Key: "resume-test-000000001", Transfer: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{5, 6, 7}; !slices.Equal(a.attempts, want) {
		t.Errorf("the server saw attempts %v, want %v", a.attempts, want)
	}
	for i, at := range out.Attempts {
		if at.N != 5+i {
			t.Errorf("attempt %d numbered %d, want %d", i, at.N, 5+i)
		}
	}
	for i, r := range raw {
		if string(r) != problem503 {
			t.Errorf("attempt %d: raw body %q, want the server's bytes %q", i+1, r, problem503)
		}
	}
	if out.Response.Code() != "unavailable" {
		t.Errorf("the answer's code is %q, want unavailable (read from the problem details)", out.Response.Code())
	}
}

// sequence answers each POST with the next status of its list (the last one
// after that), and records the key of each.
type sequence struct {
	statuses []int
	mu       sync.Mutex
	keys     []string
}

func (s *sequence) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status := s.statuses[min(len(s.keys), len(s.statuses)-1)]
	s.keys = append(s.keys, r.Header.Get(api.HeaderKey))
	s.mu.Unlock()
	w.Header().Set("Content-Type", api.ProblemType)
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"type":"about:blank","title":"x","status":` + strconv.Itoa(status) + `,"code":"x"}`))
}

// The lesson's client keeps its key on every retry. The new-key-after-5xx
// mistake keeps it after no answer or a 409, and makes a new one after each
// 5xx only: a request that committed before its server failed is then sent
// again as new.
func TestNewKeyAfterServerErrorChangesTheKeyAfterA5xxOnly(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		flaws client.Flaws
		want  []string
	}{
		{"the lesson's client", client.Flaws{}, []string{"k", "k", "k", "k", "k"}},
		{"new key after a 5xx", client.Flaws{NewKeyAfterServerError: true}, []string{"k", "k", "k1", "k1", "k2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &sequence{statuses: []int{409, 500, 409, 503, 409}}
			srv := httptest.NewServer(s)
			defer srv.Close()
			made := 0
			c := &client.Client{URLs: []string{srv.URL}, Token: "token-ada", Attempts: 5, Flaws: tt.flaws,
				Sleep:  func(context.Context, time.Duration) error { return nil },
				NewKey: func() string { made++; return "k" + strconv.Itoa(made) }}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := c.Send(ctx, client.Intent{Key: "k", Transfer: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.keys, tt.want) {
				t.Errorf("the server saw keys %v, want %v (answers 409, 500, 409, 503, 409)", s.keys, tt.want)
			}
		})
	}
}
