package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// HTTPServer serves the API for h on a free port of 127.0.0.1, as `bank-sim
// serve` does, and returns its base URL. name is how the story calls it. It
// shuts down gracefully when the phase ends.
func (r *Run) HTTPServer(h *idem.Handler, name string) (string, error) {
	r.applyBug(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens(), Log: r.Server}),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	r.Defer(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	url := "http://" + ln.Addr().String()
	r.nameURL(url, name)
	return url, nil
}

// Proxy starts a fault proxy in front of the server at url, seeded from the
// phase; what it does out of the client's sight joins the story.
func (r *Run) Proxy(url, name string) (*faults.Proxy, error) {
	p, err := faults.StartProxy(strings.TrimPrefix(url, "http://"), r.Uint64())
	if err != nil {
		return nil, err
	}
	p.Env.Note = r.Server
	r.Defer(func() { _ = p.Close() })
	r.nameURL(p.URL(), name)
	return p, nil
}

// urlNames maps the base URLs of live servers and proxies to the names the
// story gives them. Ports are unique while they are open, so one map serves
// every phase; a reused port is simply named again.
var urlNames sync.Map

func (r *Run) nameURL(url, name string) { urlNames.Store(url, name) }

func (r *Run) urlName(url string) string {
	if n, ok := urlNames.Load(url); ok {
		return n.(string)
	}
	return url
}

// Client is the lesson's retrying client for user, over urls (round-robin),
// with its jitter drawn from the phase's seed. It does not really wait
// between attempts: the waits are recorded in each Attempt and told in the
// story, so a scenario runs in milliseconds and repeats exactly.
func (r *Run) Client(user int64, urls ...string) *client.Client {
	transport := &http.Transport{}
	r.Defer(transport.CloseIdleConnections)
	var flaws client.Flaws
	if r.bug != nil {
		flaws.NewKeyPerAttempt = r.bug.NewKeyPerAttempt
	}
	return &client.Client{
		Flaws: flaws,
		URLs:  urls,
		Token: tokenOf(user),
		HTTP:  &http.Client{Transport: transport, Timeout: 10 * time.Second},
		Rand:  newRand(r.Uint64()),
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() },
		NewKey: func() string {
			return r.Key()
		},
	}
}

func tokenOf(user int64) string {
	for tok, u := range api.DemoTokens() {
		if u == user {
			return tok
		}
	}
	return ""
}

// SendHTTP sends one intent with c, narrating each attempt and recording
// what the client was told, for the "clients were told the truth" invariant.
func (r *Run) SendHTTP(ctx context.Context, c *client.Client, in client.Intent, user int64) (client.Outcome, error) {
	out, err := c.Send(ctx, in)
	for _, a := range out.Attempts {
		text := fmt.Sprintf("attempt %d → %s: ", a.N, r.urlName(a.URL))
		if a.Err != nil {
			text += "network error: " + client.Explain(a.Err)
		} else {
			text += Describe(a.Response)
		}
		if a.Retry {
			text += fmt.Sprintf(", will retry in %s", a.Wait.Round(time.Millisecond))
			if a.RetryAfter > 0 {
				text += fmt.Sprintf(" (Retry-After %s)", a.RetryAfter)
			}
		}
		r.emit(Event{Kind: "attempt", Text: text})
		r.Told(bank.Told{Intent: in.Label, UserID: user, Request: in.Transfer, Response: a.Response})
	}
	if out.Kind == client.Unknown {
		r.Step("the app gave up after %d attempts: the outcome is unknown, shown as pending (resolve with GET /transfers?key=%s)", len(out.Attempts), in.Key)
	}
	return out, err
}

// httpStatus sends one bare request, as a misbehaving client would, and
// returns the answer's status, its problem details (if any) and the
// response's media type.
func httpStatus(ctx context.Context, method, url string, header map[string]string, body string) (int, api.Problem, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return 0, api.Problem{}, "", err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, api.Problem{}, "", err
	}
	defer res.Body.Close()
	var p api.Problem
	ct := res.Header.Get("Content-Type")
	if ct == api.ProblemType {
		if err := json.NewDecoder(res.Body).Decode(&p); err != nil {
			return 0, api.Problem{}, "", err
		}
	}
	return res.StatusCode, p, ct, nil
}
