// Package client is the lesson's retrying client for the transfer API, as a
// Go package: one idempotency key per intent, made before the first attempt;
// retries only for answers that may change (no answer, 409, 429, 5xx); an
// exponential backoff with seeded jitter that honours Retry-After; a bounded
// number of attempts; and, after the last, an honest "unknown" instead of
// "failed", with Resolve to find out later.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
)

// Defaults of a Client's zero fields.
const (
	DefaultAttempts      = 4
	DefaultBaseDelay     = 50 * time.Millisecond
	DefaultMaxDelay      = 5 * time.Second
	DefaultTimeout       = 5 * time.Second
	DefaultMaxRetryAfter = 30 * time.Second
)

// Client sends transfers for one user. Its zero value is not usable: set
// URLs and Token. It is safe for concurrent use.
type Client struct {
	// URLs are the servers' base URLs ("http://127.0.0.1:8080"). With more
	// than one, attempts go round-robin, like a load balancer: a retry can
	// land on another server.
	URLs []string
	// Token is the bearer token; the server derives the user from it.
	Token string
	// HTTP sends the requests; NewHTTP's with DefaultTimeout when nil. Make
	// one with NewHTTP too: any other follows redirects, to wherever the
	// server says.
	HTTP *http.Client

	Attempts      int           // at most this many attempts per intent; DefaultAttempts when zero
	BaseDelay     time.Duration // the wait after attempt 1; doubled after each; DefaultBaseDelay when zero
	MaxDelay      time.Duration // cap on a backoff wait before its jitter (up to BaseDelay more); DefaultMaxDelay when zero
	MaxRetryAfter time.Duration // cap on an honoured Retry-After; DefaultMaxRetryAfter when zero

	// Rand draws the jitter; seed it to repeat a run. A fresh random one when nil.
	Rand *mrand.Rand
	// Sleep waits between attempts; a real, cancellable wait when nil.
	// Tests and scenarios pass one that returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// NewKey makes idempotency keys; a random UUID when nil.
	NewKey func() string
	// OnAttempt, when set, hears about each attempt as it ends.
	OnAttempt func(Attempt)
	// FirstAttempt is the number Send gives its first attempt (sent as
	// X-Bank-Sim-Attempt); 1 when zero. A client that resumes an intent
	// after earlier attempts numbers on from them.
	FirstAttempt int
	// Flaws switches on the lesson's client-side mistakes; the zero value is
	// the correct client.
	Flaws Flaws
	// Request, when set, builds each attempt's POST (its URL, credentials,
	// key header and body) for a server that spells the transfer otherwise
	// than bank-sim's API: chaos --target, through probe.Contract. The
	// client still adds the simulator's attempt and intent headers.
	Request func(ctx context.Context, base string, in Intent) (*http.Request, error)
	// ReplayedHeader is the header that marks a replay (true);
	// api.HeaderReplayed when empty.
	ReplayedHeader string

	mu   sync.Mutex
	next int
}

// Flaws are the client's mistakes, for the simulator to show failing.
type Flaws struct {
	// NewKeyPerAttempt makes a new key for every attempt instead of one per
	// intent: every retry looks new to the server.
	NewKeyPerAttempt bool
	// NewKeyAfterServerError keeps the key across retries but makes a new
	// one after a 5xx answer, as if a server error meant the request had
	// failed whole: one that committed before its server failed is sent
	// again as new.
	NewKeyAfterServerError bool
}

// Intent is one thing a user decided to do, with the key made for it. Make
// it once (NewIntent) and keep it: a retry after the app restarts must reuse
// the key.
type Intent struct {
	Key      string
	Transfer bank.TransferRequest
	// Label, when set, is sent as X-Bank-Sim-Intent, the simulator's oracle
	// (see api.HeaderIntent). Real clients leave it empty.
	Label string
	// Body, when set, is sent instead of Transfer's JSON.
	Body []byte
}

func (in Intent) body() []byte {
	if in.Body != nil {
		return in.Body
	}
	return in.Transfer.Body()
}

// NewIntent makes the key for one transfer, before the first attempt.
func (c *Client) NewIntent(t bank.TransferRequest) Intent {
	return Intent{Key: c.newKey(), Transfer: t}
}

// Kind is what a client may tell its user.
type Kind int

const (
	// Unknown: no settled answer arrived. The transfer may or may not have
	// happened; show it as pending and Resolve it later. Never "failed".
	Unknown Kind = iota
	// OK: the transfer happened (2xx).
	OK
	// Rejected: the server refused it for good (4xx other than 409 and 429).
	Rejected
)

func (k Kind) String() string { return [...]string{"unknown", "ok", "rejected"}[k] }

// Attempt is one try of an intent.
type Attempt struct {
	N   int    `json:"n"`
	URL string `json:"url"`
	Key string `json:"key"`
	// Response is the answer; Status 0 when none came (Err says why).
	Response bank.Response `json:"response"`
	// Raw is the body exactly as it arrived. Response.Body is the bank's
	// form of it, rebuilt from problem details for a refusal; a replay is
	// compared with its original byte for byte on Raw.
	Raw []byte `json:"-"`
	Err error  `json:"-"`
	// RetryAfter is the server's Retry-After, if any.
	RetryAfter time.Duration `json:"retryAfterNs,omitempty"`
	// Retry says whether the client will try again, and Wait how long it
	// waits first (the backoff, or Retry-After when that is longer).
	Retry bool          `json:"retry"`
	Wait  time.Duration `json:"waitNs,omitempty"`
}

// Outcome returns the attempt's outcome as ShouldRetry sees it: "network" or
// the status code.
func (a Attempt) Outcome() string {
	if a.Err != nil {
		return "network"
	}
	return strconv.Itoa(a.Response.Status)
}

// Outcome is what happened to an intent.
type Outcome struct {
	Kind     Kind
	Key      string
	Response bank.Response // the last answer (zero when the last attempt got none)
	Attempts []Attempt
}

// ShouldRetry is the lesson's rule: retry what may succeed later — no
// answer at all (status 0), 409 (in progress), 429 (slow down) and 5xx —
// and never a 2xx or another 4xx, which the same request would get again.
func ShouldRetry(status int) bool {
	return status == 0 || status == 409 || status == 429 || status >= 500
}

// Send carries the intent to the server, retrying by the rules, and says
// what to tell the user. The error is only for a cancelled context or a
// request that cannot be built; a network failure on every attempt is an
// Unknown outcome, not an error.
func (c *Client) Send(ctx context.Context, in Intent) (Outcome, error) {
	if in.Key == "" {
		return Outcome{}, errors.New("client: the intent has no key; make it with NewIntent before the first attempt")
	}
	out := Outcome{Key: in.Key}
	attempts := c.attempts()
	first := max(c.FirstAttempt, 1)
	for n := 1; n <= attempts; n++ {
		if n > 1 && (c.Flaws.NewKeyPerAttempt || c.Flaws.NewKeyAfterServerError && out.Response.Status >= 500) {
			in.Key = c.newKey()
		}
		a := c.try(ctx, in, first+n-1)
		if ctx.Err() != nil {
			out.Attempts = append(out.Attempts, a)
			return out, ctx.Err()
		}
		out.Response = a.Response
		a.Retry = ShouldRetry(a.Response.Status) && n < attempts
		if a.Retry {
			a.Wait = c.backoff(n, a.RetryAfter)
		}
		out.Attempts = append(out.Attempts, a)
		if c.OnAttempt != nil {
			c.OnAttempt(a)
		}
		if !ShouldRetry(a.Response.Status) {
			out.Kind = Rejected
			if a.Response.OK() {
				out.Kind = OK
			}
			return out, nil
		}
		if a.Retry {
			if err := c.sleep(ctx, a.Wait); err != nil {
				return out, err
			}
		}
	}
	out.Kind = Unknown
	return out, nil
}

// try makes one attempt.
func (c *Client) try(ctx context.Context, in Intent, n int) Attempt {
	base := c.pick()
	a := Attempt{N: n, URL: base, Key: in.Key}
	req, err := c.newRequest(ctx, base, in)
	if err != nil {
		a.Err = err
		return a
	}
	req.Header.Set(api.HeaderAttempt, strconv.Itoa(n))
	if in.Label != "" {
		req.Header.Set(api.HeaderIntent, in.Label)
	}
	a.Response, a.Raw, a.RetryAfter, a.Err = c.do(req)
	return a
}

// newRequest is the attempt's POST: bank-sim's API, or Request's.
func (c *Client) newRequest(ctx context.Context, base string, in Intent) (*http.Request, error) {
	if c.Request != nil {
		return c.Request(ctx, base, in)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(base, "/")+"/transfers", bytes.NewReader(in.body()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderKey, in.Key)
	return req, nil
}

// do sends req and reads the answer whole. Any failure to get a complete
// answer (refused, reset, timed out, cut short) is a network error: the
// client cannot tell whether the server acted.
func (c *Client) do(req *http.Request) (resp bank.Response, raw []byte, retryAfter time.Duration, err error) {
	res, err := c.httpClient().Do(req)
	var redirect *RedirectError
	if errors.As(err, &redirect) {
		// An answer, and a final one: the same request would be
		// redirected again. Err says why it was not followed.
		return bank.Response{Status: redirect.Status}, nil, 0, redirect
	}
	if err != nil {
		return bank.Response{}, nil, 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return bank.Response{}, nil, 0, fmt.Errorf("reading the response: %w", err)
	}
	replayed := api.HeaderReplayed
	if c.ReplayedHeader != "" {
		replayed = c.ReplayedHeader
	}
	resp = bank.Response{Status: res.StatusCode, Body: body, Replayed: strings.EqualFold(strings.TrimSpace(res.Header.Get(replayed)), "true")}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == api.ProblemType {
		var p api.Problem
		if json.Unmarshal(body, &p) == nil {
			r := p.Response()
			r.Replayed = resp.Replayed
			resp = r
		}
	}
	return resp, body, c.retryAfter(res.Header.Get(api.HeaderRetryAfter)), nil
}

// retryAfter reads Retry-After in either of its forms: seconds or a date.
func (c *Client) retryAfter(h string) time.Duration {
	if h == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = time.Until(t)
	}
	limit := c.MaxRetryAfter
	if limit <= 0 {
		limit = DefaultMaxRetryAfter
	}
	return min(max(d, 0), limit)
}

// backoff is the wait after attempt n: BaseDelay·2^(n-1), capped at
// MaxDelay, plus a jitter drawn from [0, BaseDelay) so that clients who
// failed together do not come back together; or the server's Retry-After if
// longer. The jitter comes on top of the cap, not under it: clipped by the
// cap (min(d+jitter, MaxDelay)) it would vanish exactly when many clients
// have been failing for a while, and they would all retry in lockstep.
func (c *Client) backoff(n int, retryAfter time.Duration) time.Duration {
	base, limit := c.BaseDelay, c.MaxDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	if limit <= 0 {
		limit = DefaultMaxDelay
	}
	d := base << min(n-1, 30)
	if d <= 0 || d > limit {
		d = limit
	}
	d += time.Duration(c.jitter(int64(base)))
	return max(d, retryAfter)
}

func (c *Client) jitter(n int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Rand == nil {
		c.Rand = mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64()))
	}
	return c.Rand.Int64N(n)
}

// pick returns the next server, round-robin.
func (c *Client) pick() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.URLs) == 0 {
		return ""
	}
	u := c.URLs[c.next%len(c.URLs)]
	c.next++
	return u
}

func (c *Client) attempts() int {
	if c.Attempts > 0 {
		return c.Attempts
	}
	return DefaultAttempts
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return NewHTTP(DefaultTimeout, nil)
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if c.Sleep != nil {
		return c.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (c *Client) newKey() string {
	if c.NewKey != nil {
		return c.NewKey()
	}
	return NewUUID()
}

// NewUUID returns a random (version 4) UUID, a good idempotency key.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Resolve asks what became of key: the stored answer (found), or found
// false when no request with the key ever arrived, so sending the intent
// again with the same key is safe. A 409 answer means it is still in
// progress. An error means the question itself got no answer.
func (c *Client) Resolve(ctx context.Context, key string) (resp bank.Response, found bool, err error) {
	base := c.pick()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(base, "/")+"/transfers?key="+url.QueryEscape(key), nil)
	if err != nil {
		return bank.Response{}, false, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	resp, _, _, err = c.do(req)
	if err != nil {
		return bank.Response{}, false, err
	}
	if resp.Status == 404 && resp.Code() == api.CodeUnknownKey {
		return resp, false, nil
	}
	return resp, true, nil
}

// Explain says what a network error looked like to the client, without the
// method and URL that net/http wraps around it.
func Explain(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case errors.Is(err, io.EOF):
		return "the connection closed with no response (EOF)"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the response was cut short (unexpected EOF)"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset by peer"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return "timed out waiting for the response"
	}
	return err.Error()
}
