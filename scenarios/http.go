package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
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
// serve` does, and returns its base URL. name is how the story calls it
// ("server A"), and its lane in pictures of the run. It shuts down
// gracefully when the phase ends.
func (r *Run) HTTPServer(h *idem.Handler, name string) (string, error) {
	r.applyBug(h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("listen: %w", err)
	}
	apiServer := api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens(),
		Log: func(format string, args ...any) { r.ServerAt(name, format, args...) }})
	srv := &http.Server{
		Handler:           api.LogRequests(apiServer, api.DemoTokens(), r.arrivedHTTP(name), r.answeredHTTP(name, h)),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = api.Serve(srv, ln) }()
	r.Defer(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	url := "http://" + ln.Addr().String()
	r.nameURL(url, name)
	return url, nil
}

// arrivedHTTP and answeredHTTP tell the pictures what the server called
// lane saw and did.
func (r *Run) arrivedHTTP(lane string) func(api.Access) {
	return func(a api.Access) {
		text := a.Method + " " + a.Path
		if a.Key != "" {
			text += ", key " + a.Key
		}
		r.emit(Event{Kind: KindArrive, From: "network", To: lane, Delivery: r.httpDelivery(a.Intent, a.Attempt), Text: text})
	}
}

func (r *Run) answeredHTTP(lane string, h *idem.Handler) func(api.Access) {
	return func(a api.Access) {
		id := r.httpDelivery(a.Intent, a.Attempt)
		resp := bank.Response{Status: a.Status, Replayed: a.Replayed}
		switch {
		case a.TransferID != 0:
			resp = bank.Created(bank.Receipt{TransferID: a.TransferID, AmountKobo: a.AmountKobo})
			resp.Replayed = a.Replayed
		case a.Code != "":
			resp = bank.Reject(a.Status, a.Code, "")
			resp.Replayed = a.Replayed
		}
		var err error
		if a.Status >= 500 {
			err = errors.New("the server failed")
		}
		if a.Method != "POST" || a.Status == 401 || a.Status == 413 || a.Status == 415 {
			r.emit(Event{Kind: KindAnswer, From: lane, To: "network", Delivery: id, Text: resp.Summary()})
			return
		}
		r.served(context.Background(), lane, id, h, a.Intent, resp, err, false)
	}
}

// httpDelivery numbers an HTTP request by its intent and attempt headers,
// which the client sets and the proxy passes on, so that the client's and
// the server's view of one request can be joined.
func (r *Run) httpDelivery(intent string, attempt int) int {
	if intent == "" {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.httpIDs == nil {
		r.httpIDs = map[string]int{}
	}
	k := fmt.Sprintf("%s#%d", intent, attempt)
	if id, ok := r.httpIDs[k]; ok {
		return id
	}
	r.deliveries++
	r.httpIDs[k] = r.deliveries
	return r.deliveries
}

// Proxy starts a fault proxy in front of the server at url, seeded from the
// phase; what it does out of the client's sight joins the story.
func (r *Run) Proxy(url, name string) (*faults.Proxy, error) {
	p, err := faults.StartProxy(strings.TrimPrefix(url, "http://"), r.Uint64())
	if err != nil {
		return nil, err
	}
	p.Env.Note = func(format string, args ...any) { r.ServerAt("network", format, args...) }
	p.Env.Struck = func(s faults.Strike) { r.struck(name, s) }
	for _, f := range r.faults {
		if fault, err := faults.NewConn(f.Name); err == nil {
			p.Override(faults.ConnRule{Fault: fault, Attempts: f.Attempts})
		}
	}
	r.mu.Lock()
	r.proxies = append(r.proxies, p)
	r.mu.Unlock()
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
// story, so a scenario runs in milliseconds and repeats exactly. Each
// attempt is told as it ends.
func (r *Run) Client(user int64, urls ...string) *client.Client {
	transport := &http.Transport{}
	r.Defer(transport.CloseIdleConnections)
	var flaws client.Flaws
	if r.bug != nil {
		flaws.NewKeyPerAttempt = r.bug.NewKeyPerAttempt
		flaws.NewKeyAfterServerError = r.bug.NewKeyAfterServerError
	}
	lane := userName(user)
	return &client.Client{
		Flaws: flaws,
		URLs:  urls,
		Token: tokenOf(user),
		HTTP:  &http.Client{Transport: &tracedTransport{r: r, lane: lane, next: transport}, Timeout: 10 * time.Second},
		Rand:  newRand(r.Uint64()),
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() },
		NewKey: func() string {
			return r.Key()
		},
		OnAttempt: func(a client.Attempt) {
			text := fmt.Sprintf("attempt %d", a.N)
			if len(urls) > 1 {
				text += " → " + r.urlName(a.URL)
			}
			text += ": "
			if a.Err != nil {
				text += "network error: " + client.Explain(a.Err)
			} else {
				text += Describe(a.Response)
			}
			if a.Retry {
				text += ", will retry in " + Dur(a.Wait)
				if a.RetryAfter > 0 {
					text += " (Retry-After: " + Dur(a.RetryAfter) + ")"
				}
			}
			r.emit(Event{Kind: KindAttempt, From: "network", To: lane, Text: text, Delivery: r.attemptDelivery(a)})
		},
	}
}

// attemptDelivery finds the number given to an attempt's request.
func (r *Run) attemptDelivery(a client.Attempt) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keyIDs[fmt.Sprintf("%s#%d", a.Key, a.N)]
}

// tracedTransport tells the pictures that a request leaves its client.
type tracedTransport struct {
	r    *Run
	lane string
	next http.RoundTripper
}

func (t *tracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	attempt, _ := strconv.Atoi(req.Header.Get(api.HeaderAttempt))
	id := t.r.httpDelivery(req.Header.Get(api.HeaderIntent), attempt)
	key := req.Header.Get(api.HeaderKey)
	if id == 0 {
		t.r.mu.Lock()
		t.r.deliveries++
		id = t.r.deliveries
		t.r.mu.Unlock()
	}
	t.r.mu.Lock()
	if t.r.keyIDs == nil {
		t.r.keyIDs = map[string]int{}
	}
	t.r.keyIDs[fmt.Sprintf("%s#%d", key, attempt)] = id
	t.r.mu.Unlock()
	text := req.Method + " " + req.URL.Path
	if attempt > 0 {
		text = fmt.Sprintf("attempt %d: %s", attempt, text)
	}
	if key != "" {
		text += ", key " + key
	}
	t.r.emit(Event{Kind: KindSend, From: t.lane, To: "network", Delivery: id, Text: text})
	return t.next.RoundTrip(req)
}

func tokenOf(user int64) string {
	for tok, u := range api.DemoTokens() {
		if u == user {
			return tok
		}
	}
	return ""
}

// SendHTTP sends one intent with c (each attempt is told as it ends) and
// records what the client was told, for the "clients were told the truth"
// invariant.
func (r *Run) SendHTTP(ctx context.Context, c *client.Client, in client.Intent, user int64) (client.Outcome, error) {
	out, err := c.Send(ctx, in)
	for _, a := range out.Attempts {
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
