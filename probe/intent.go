package probe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/banksim/bank-sim/faults"
)

// faultHeader carries, from the probe to its own proxy, which fault to apply
// to a request; the proxy removes it, so the target never sees it.
const faultHeader = "X-Bank-Sim-Probe-Fault"

// intent is one thing a user decided to do: one transfer, one key. Every
// attempt of it reuses the key, as the lesson's client does.
type intent struct {
	Label string
	User  User
	Key   string // "" sends no key header
	T     Transfer
	// NoAuth sends no credentials; Token, when set, replaces the user's.
	NoAuth bool
	Token  string

	Attempts []*Attempt
}

// Attempt is one request of an intent and what came of it.
type Attempt struct {
	Intent string `json:"intent"`
	User   string `json:"user"`
	Key    string `json:"key,omitempty"`
	Copy   int    `json:"copy"` // which of the target's URLs (0-based)
	// Via is how it travelled: "direct", or the proxy's fault.
	Via      string   `json:"via"`
	Body     string   `json:"body"`
	Answer   *Answer  `json:"answer,omitempty"`
	Error    string   `json:"error,omitempty"`
	Proxy    string   `json:"proxy,omitempty"` // what the proxy saw that the client did not
	Duration Duration `json:"duration"`

	// waited is the time from the request's last byte to its answer.
	waited time.Duration
}

// Duration is a time.Duration that reads well in JSON.
type Duration time.Duration

// MarshalJSON writes "1.234ms".
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := time.ParseDuration(strings.Trim(string(b), `"`))
	*d = Duration(v)
	return err
}

// sendOpts says how one attempt travels.
type sendOpts struct {
	copy      int
	fault     faults.ConnFault // through the proxy with this fault; nil: direct
	via       string           // how evidence names the fault
	reordered bool
}

// request builds the attempt's request.
func (r *run) request(in *intent, o sendOpts) wireRequest {
	c := r.cfg.Contract
	ep := r.eps[o.copy]
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json")
	if !in.NoAuth {
		tok := in.User.Token
		if in.Token != "" {
			tok = in.Token
		}
		h.Set(c.AuthHeader, c.authValue(tok))
	}
	if in.Key != "" {
		h.Set(c.KeyHeader, in.Key)
	}
	req := wireRequest{Method: "POST", Addr: ep.Addr, Host: ep.Host, Target: ep.Prefix + c.Path, Header: h, Body: c.body(in.T, o.reordered)}
	if o.fault != nil {
		req.Addr = strings.TrimPrefix(r.proxies[o.copy].URL(), "http://")
		h.Set(faultHeader, r.attach(o.fault))
	}
	return req
}

// newAttempt records the start of an attempt.
func (r *run) newAttempt(in *intent, o sendOpts, body []byte) *Attempt {
	via := "direct"
	if o.via != "" {
		via = o.via
	}
	a := &Attempt{Intent: in.Label, User: in.User.Name, Key: in.Key, Copy: o.copy, Via: via, Body: string(body)}
	in.Attempts = append(in.Attempts, a)
	return a
}

// send makes one attempt of in and records it.
func (r *run) send(ctx context.Context, in *intent, o sendOpts) *Attempt {
	req := r.request(in, o)
	a := r.newAttempt(in, o, req.Body)
	start := time.Now()
	h, err := hold(ctx, req, r.cfg.Timeout)
	if err == nil {
		err = h.fire()
		if err != nil {
			h.close()
		}
	}
	r.finish(a, h, err, start)
	return a
}

// finish reads the answer of a fired request into a.
func (r *run) finish(a *Attempt, h *held, err error, start time.Time) {
	if err == nil {
		var status int
		var header http.Header
		var body []byte
		status, header, body, err = h.read()
		if err == nil {
			a.Answer = r.cfg.Contract.read(status, header, body)
			a.waited = time.Since(h.Fired)
			if a.Answer.Replayed {
				r.mu.Lock()
				r.caps.Replayed = true
				r.mu.Unlock()
			}
		}
	}
	if err != nil {
		a.Error = explain(err)
	}
	a.Duration = Duration(time.Since(start))
}

// Outcome is where an intent stands after settling.
type Outcome int

const (
	// Settled: a final answer (2xx, or a 4xx other than 409 and 429).
	Settled Outcome = iota
	// Stuck: still 409 "in progress" when the settle time ran out.
	Stuck
	// Failing: still 5xx (or 429) when the settle time ran out.
	Failing
	// Silent: no answer at all when the settle time ran out.
	Silent
)

// settle retries in with the same key until its answer is final or the
// settle time runs out, as the lesson's client does: after no answer, 409,
// 429 or 5xx, with a short seeded backoff and Retry-After honoured (up to a
// tenth of the settle time). It returns the last answer (nil if none came).
func (r *run) settle(ctx context.Context, in *intent, copy int) (*Answer, Outcome) {
	return r.settleWithin(ctx, in, copy, r.cfg.Settle)
}

// settleWithin is settle, bounded by limit instead of the settle time.
func (r *run) settleWithin(ctx context.Context, in *intent, copy int, limit time.Duration) (*Answer, Outcome) {
	deadline := time.Now().Add(limit)
	var last *Answer
	if n := len(in.Attempts); n > 0 {
		last = in.Attempts[n-1].Answer
		if last != nil && last.Settled() {
			return last, Settled
		}
	}
	for try := 0; time.Now().Before(deadline) && ctx.Err() == nil; try++ {
		// 5 ms, doubling, with jitter: a retry soon after a lost answer is
		// the story; Retry-After slows it when the server asks.
		wait := time.Duration(float64(5*time.Millisecond) * float64(int(1)<<min(try, 7)) * (0.5 + r.float()))
		if last != nil && last.RetryAfter > 0 {
			// Honoured, but capped at a tenth of the settle time, so that
			// a server's Retry-After cannot use up the whole of it in one
			// wait: the probe wants to see the key released, not to sleep.
			wait = max(wait, min(time.Duration(last.RetryAfter)*time.Second, limit/10))
		}
		if wait = min(wait, time.Until(deadline)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		if a := r.send(ctx, in, sendOpts{copy: copy}); a.Answer != nil {
			last = a.Answer
			if last.Settled() {
				return last, Settled
			}
		}
	}
	switch {
	case last == nil:
		return nil, Silent
	case last.Settled():
		return last, Settled
	case last.Status == 409:
		return last, Stuck
	default:
		return last, Failing
	}
}

// receipts returns the distinct transfers in's answers named, in the order
// first seen, with the first answer that named each.
func (in *intent) receipts() []*Answer {
	var out []*Answer
	seen := map[string]bool{}
	for _, a := range in.Attempts {
		if a.Answer != nil && a.Answer.Receipt() && !seen[a.Answer.TransferID] {
			seen[a.Answer.TransferID] = true
			out = append(out, a.Answer)
		}
	}
	return out
}

// transferIDs lists the distinct transfer ids of receipts.
func transferIDs(rs []*Answer) string {
	var ids []string
	for _, a := range rs {
		ids = append(ids, a.TransferID)
	}
	return strings.Join(ids, ", ")
}

// line is an attempt as evidence prints it.
func (a *Attempt) line() string {
	who := a.User
	key := "no key"
	if a.Key != "" {
		key = "key " + shortKey(a.Key)
	}
	s := fmt.Sprintf("%s POST %s %s", who, key, a.Body)
	if a.Via != "direct" {
		s += " [" + a.Via + "]"
	}
	if a.Copy > 0 {
		s += fmt.Sprintf(" to copy %d", a.Copy+1)
	}
	switch {
	case a.Answer != nil:
		s += " → " + a.Answer.String()
	default:
		s += " → no answer: " + a.Error
	}
	if a.Proxy != "" {
		s += " (" + a.Proxy + ")"
	}
	return s
}

func shortKey(k string) string {
	if len(k) > 13 {
		return k[:8] + "…"
	}
	return k
}
