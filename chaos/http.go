package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// The client's patience and backoff in an HTTP run. No fault holds an answer
// past the timeout, so it only bounds a run that went wrong; the backoff is
// short because the faults need no real patience, only a retry.
const (
	httpTimeout       = 30 * time.Second
	httpBaseDelay     = 200 * time.Microsecond
	httpMaxDelay      = 2 * time.Millisecond
	httpMaxRetryAfter = 2 * time.Millisecond
	saltJitter        = 0x6a6974746572
)

// httpRig runs a chaos run over real sockets: for each instance an api
// server on 127.0.0.1 with its own handler (all sharing the pool and the key
// store), a fault proxy in front of it, and per intent a retrying client
// whose attempts go, one by one, to the proxies the schedule picked. The
// fault of each attempt is the schedule's, as in process: the proxy fails the
// connection (lose-response, drop-request, duplicate, late, slow), or the
// server fails itself (crash-after-claim, fail-before-commit, clock-jump).
type httpRig struct {
	e       *engine
	servers []*http.Server
	proxies []*faults.Proxy
	urls    []string       // each instance's proxy
	index   map[string]int // proxy URL → instance
	tokens  map[int64]string
	http    *http.Client
	// healing switches every fault off.
	healing atomic.Bool
	// calm holds the intents being sent again after their final answer: no
	// fault for them, whatever their attempt number.
	calm sync.Map
	// inflight counts the servers' handlers still running, including those
	// of requests whose clients went away.
	inflight sync.WaitGroup
	// target, when set, is someone else's server behind the proxies
	// (chaos --target): the clients speak its contract.
	target *Target
	// gone holds, per "intent/attempt", a channel closed when the client
	// has finished that attempt: a late request waits for it.
	gone sync.Map
	// lost holds, per "intent/attempt", what a target answered to an
	// attempt whose answer the proxy dropped (*Lost).
	lost sync.Map
	// db is the database fault proxy in front of a target's PostgreSQL
	// (Target.DBListen), and dbArmed the fault armed on it.
	db      *faults.DBProxy
	dbMu    sync.Mutex
	dbArmed faults.DBFault
}

func startHTTP(e *engine) (*httpRig, error) {
	r := &httpRig{e: e, index: map[string]int{}, tokens: map[int64]string{}}
	byToken := map[string]int64{}
	for _, u := range e.lay.users {
		tok := fmt.Sprintf("chaos-user-%d", u)
		r.tokens[u], byToken[tok] = tok, u
	}
	r.http = client.NewHTTP(httpTimeout, &http.Transport{DisableKeepAlives: true})
	for inst, h := range e.handlers {
		listen := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
		if e.hosts != nil {
			listen = e.hosts[inst].Listen
		}
		ln, err := listen()
		if err != nil {
			r.close()
			return nil, fmt.Errorf("listen: %w", err)
		}
		srv := &http.Server{Handler: r.serverFaults(h, byToken, inst), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = api.Serve(srv, ln) }()
		r.servers = append(r.servers, srv)
		p, err := faults.StartProxy(ln.Addr().String(), e.cfg.Seed+uint64(inst))
		if err != nil {
			r.close()
			return nil, err
		}
		p.Select = r.connFault
		r.proxies = append(r.proxies, p)
		r.urls = append(r.urls, p.URL())
		r.index[p.URL()] = inst
	}
	return r, nil
}

// close stops the proxies, then the servers (requests in flight finish).
func (r *httpRig) close() {
	for _, p := range r.proxies {
		_ = p.Close()
	}
	for _, s := range r.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = s.Shutdown(ctx)
		cancel()
	}
	r.http.CloseIdleConnections()
}

// scheduled returns the fault the schedule gives this request: the intent
// from the simulator's intent header, the attempt from the attempt header.
// None while healing, or for a request the schedule does not know.
func (r *httpRig) scheduled(req *http.Request) (intent, attempt int, fault string) {
	if r.healing.Load() {
		return 0, 0, ""
	}
	i, err := strconv.Atoi(strings.TrimPrefix(req.Header.Get(api.HeaderIntent), "intent-"))
	if err != nil || i < 0 {
		return 0, 0, ""
	}
	n, err := strconv.Atoi(req.Header.Get(api.HeaderAttempt))
	if err != nil || n < 1 || n > r.e.cfg.MaxAttempts {
		return 0, 0, ""
	}
	if _, calm := r.calm.Load(i); calm {
		return 0, 0, ""
	}
	return i, n, r.e.cfg.Fault(i, n)
}

// connFault is each proxy's Select: the faults that happen on the wire.
func (r *httpRig) connFault(_ int, req *http.Request) faults.ConnFault {
	i, n, fault := r.scheduled(req)
	switch fault {
	case FaultDisconnect:
		// The client goes away once its request is sent: it resets the
		// connection, or half-closes it and waits for the answer.
		if r.e.cfg.DisconnectPoint(i, n)%2 == 0 {
			return &faults.ResetAfterSend{MaxDelay: 4 * time.Millisecond}
		}
		return &faults.HalfClose{}
	case FaultLoseResponse:
		if r.target != nil {
			return &lostAnswer{rig: r, at: fmt.Sprintf("%d/%d", i, n)} // and keeps what the target said
		}
		return &faults.Tunnel{} // the server commits; the connection drops
	case FaultDropRequest:
		return &faults.Reset{} // reset before the request reaches the server
	case FaultDuplicate:
		if r.target != nil {
			return &faults.DuplicateConn{Copies: 2, Answered: r.target.copiesAnswered(r.e)}
		}
		return &faults.DuplicateConn{Copies: 2}
	case FaultLate:
		return &lateConn{e: r.e, gone: r.clientGone(i, n)}
	case FaultSlow:
		return &faults.Latency{Latency: time.Millisecond}
	}
	return nil
}

// serverFaults is one server: the api on h, wrapped so that the faults that
// happen inside a server (it crashes after claiming the key, its transaction
// breaks before COMMIT, its clock jumps, it deadlocks, its lock expires while
// it writes) hit the attempts the schedule says.
func (r *httpRig) serverFaults(h *idem.Handler, tokens map[string]int64, inst int) http.Handler {
	e := r.e
	var flaws api.Flaws
	if e.cfg.Bug != nil {
		flaws = e.cfg.Bug.API
	}
	apiH := api.NewServer(api.Config{Handler: h, Tokens: tokens, Flaws: flaws, Log: func(_ string, args ...any) {
		for _, a := range args {
			if err, ok := a.(error); ok && errors.Is(err, idem.ErrLostLock) {
				e.count(PathFencing)
			}
		}
	}})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.inflight.Add(1)
		defer r.inflight.Done()
		i, n, fault := r.scheduled(req)
		ctx := e.observe(req.Context())
		if e.afterCommit != nil {
			hooks := idem.HooksFrom(ctx)
			prev := hooks.AfterCommit
			hooks.AfterCommit = func(ctx context.Context) {
				if prev != nil {
					prev(ctx)
				}
				e.afterCommit(ctx)
			}
			ctx = idem.WithHooks(ctx, hooks)
		}
		if fault == FaultDisconnect {
			// The server finished although its client went away: the
			// request's context ended, and yet it answered other than 5xx.
			sw := &statusWriter{ResponseWriter: w}
			defer func() {
				if req.Context().Err() != nil && sw.status != 0 && sw.status < 500 {
					e.count(PathDisconnectFinished)
				}
			}()
			w = sw
		}
		switch fault {
		case FaultCrashAfterClaim:
			r.crash(w, req.WithContext(ctx), apiH, i, n)
			return
		case FaultFailBeforeCommit:
			// The handler's error becomes the api's 500, never stored.
			hooks := idem.HooksFrom(ctx)
			hooks.BeforeCommit = func(context.Context) error { return faults.ErrFailedBeforeCommit }
			ctx = idem.WithHooks(ctx, hooks)
		case FaultClockJump:
			e.clock.Advance(idem.DefaultLockTTL + time.Second)
		case FaultDeadlock:
			ctx = e.deadlock(ctx, req.Header.Get(api.HeaderKey), e.plan(i).Request.From)
		case FaultFreeze:
			hook, thaw := e.freeze(ctx, e.plan(i).Label, e.plan(i).Request.From)
			ctx = bank.WithAfterChecks(ctx, hook)
			defer thaw()
		case FaultExpireMidWrite:
			p := e.plan(i)
			ireq := idem.Request{UserID: p.UserID, Key: req.Header.Get(api.HeaderKey), Body: p.Request.Body()}
			// The api labels the transfer with its intent inside; the retry
			// that takes over is sent in process, so it is labelled here.
			ctx = bank.WithAfterChecks(ctx, e.expireMidWrite(bank.WithIntent(ctx, p.Label), ireq, inst))
		}
		apiH.ServeHTTP(w, req.WithContext(ctx))
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// crash serves req through CrashAfterClaim: once the server has claimed the
// key it stops cold, and its connection is cut with no answer, as a server
// process that died would leave it (the proxy in front answers 502). Healing
// wakes it later, as the in-process run does. A request with no key to claim
// (a replay, a 409) is answered normally.
func (r *httpRig) crash(w http.ResponseWriter, req *http.Request, apiH http.Handler, i, n int) {
	body, err := io.ReadAll(io.LimitReader(req.Body, api.DefaultMaxBody+1))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	var rec *httptest.ResponseRecorder
	next := func(ctx context.Context, _ idem.Request) (bank.Response, error) {
		rec = httptest.NewRecorder()
		inner := req.Clone(ctx)
		inner.Body = io.NopCloser(bytes.NewReader(body))
		apiH.ServeHTTP(rec, inner)
		return bank.Response{Status: rec.Code}, nil
	}
	_, err = r.e.crash.Deliver(req.Context(), r.e.env, faults.Delivery{Attempt: n, Intent: fmt.Sprintf("intent-%d", i)}, next)
	if err != nil {
		panic(http.ErrAbortHandler) // silent: the connection closes, no answer
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// lateConn is the late fault on the wire: the client's connection drops at
// once (it gave up), and the request reaches the server only once the client
// has recorded the end of that attempt, and lateBy after that.
type lateConn struct {
	e    *engine
	gone <-chan struct{}
}

func (*lateConn) Name() string { return FaultLate }

func (l *lateConn) Exchange(ctx context.Context, env *faults.Env, x *faults.Exchange) error {
	// Counted before the client can see anything, so healing, which waits
	// for every late request, cannot start before this one is counted.
	l.e.late.add()
	defer l.e.late.done()
	_ = x.Drop()
	t := time.NewTimer(attemptTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.gone:
	case <-t.C:
		// A client that never records its attempt: deliver anyway.
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(lateBy):
	}
	_, _, err := x.RoundTrip(ctx)
	return err
}

// clientGone returns a channel closed once the client of intent i has
// recorded the end of attempt n (markGone).
func (r *httpRig) clientGone(i, n int) <-chan struct{} {
	ch, _ := r.gone.LoadOrStore(fmt.Sprintf("%d/%d", i, n), make(chan struct{}))
	return ch.(chan struct{})
}

// markGone says that the client of intent i has finished attempt n.
func (r *httpRig) markGone(i, n int) {
	ch, _ := r.gone.LoadOrStore(fmt.Sprintf("%d/%d", i, n), make(chan struct{}))
	close(ch.(chan struct{}))
}

// client returns the retrying client for intent i: its attempts go to the
// proxies of the instances the schedule picked, in order (the client's
// round-robin over this list is the schedule's load balancer), its jitter is
// seeded, and a buggy one makes its keys as Config.AttemptKey does.
func (r *httpRig) client(i int, p Planned, urls []string, attempts int, record func(client.Attempt)) *client.Client {
	cfg := r.e.cfg
	keys := 1
	c := &client.Client{
		URLs:          urls,
		Token:         r.tokens[p.UserID],
		HTTP:          r.http,
		Attempts:      attempts,
		BaseDelay:     httpBaseDelay,
		MaxDelay:      httpMaxDelay,
		MaxRetryAfter: httpMaxRetryAfter,
		Rand:          rand.New(rand.NewPCG(cfg.Seed^saltJitter, uint64(i))),
		NewKey: func() string {
			keys++
			if cfg.Bug != nil && cfg.Bug.NewKeyAfterServerError {
				return NewKey(p, keys)
			}
			return cfg.AttemptKey(p, keys)
		},
		OnAttempt: record,
	}
	if cfg.Bug != nil {
		c.Flaws.NewKeyPerAttempt = cfg.Bug.NewKeyPerAttempt
		c.Flaws.NewKeyAfterServerError = cfg.Bug.NewKeyAfterServerError
	}
	if r.target != nil {
		r.targetClient(c, p)
	}
	return c
}

// attemptOf records a client's attempt as the history's.
func (r *httpRig) attemptOf(a client.Attempt, n int, phase, fault string, start, end int64) Attempt {
	at := Attempt{N: n, Phase: phase, Fault: fault, Key: a.Key, Instance: r.index[a.URL], StartNs: start, EndNs: end}
	r.see(&at, a.Response, a.Err)
	if a.Err == nil && !bytes.Equal(a.Raw, a.Response.Body) {
		at.Wire = Bytes(a.Raw)
	}
	return at
}

func (r *httpRig) see(at *Attempt, resp bank.Response, err error) {
	switch {
	case err != nil:
		at.Error, at.Seen = client.Explain(err), SeenUnknown
	default:
		at.answered(resp)
	}
}

// faultPhase sends intent i with the retrying client, faults on.
func (r *httpRig) faultPhase(ctx context.Context, i int, p Planned) *Intent {
	e, cfg := r.e, r.e.cfg
	in := newIntent(i, p)
	urls := make([]string, cfg.MaxAttempts)
	for n := range urls {
		urls[n] = r.urls[cfg.Instance(i, n+1)]
	}
	start := e.since()
	c := r.client(i, p, urls, cfg.MaxAttempts, func(a client.Attempt) {
		fault := cfg.Fault(i, a.N)
		if fault != "" {
			e.mu.Lock()
			e.fired[fault]++
			e.mu.Unlock()
		}
		end := e.since()
		at := r.attemptOf(a, a.N, PhaseFault, fault, start, end)
		at.Reordered = r.reordered(p, a.N)
		if fault == FaultLoseResponse {
			r.keepLost(&at, i, a.N)
		}
		in.Attempts = append(in.Attempts, at)
		if fault == FaultLate {
			r.markGone(i, a.N)
		}
		start = end + int64(a.Wait)
	})
	out, err := c.Send(bank.WithIntent(ctx, p.Label), client.Intent{Key: p.Key, Transfer: p.Request, Label: p.Label})
	if err == nil && out.Kind != client.Unknown && len(in.Attempts) > 0 {
		in.Outcome = in.Attempts[len(in.Attempts)-1].Seen
	}
	return in
}

// sendOnce sends in once more with its key, no fault, on the server the
// schedule picks for that attempt, and records the attempt.
func (r *httpRig) sendOnce(ctx context.Context, in *Intent, p Planned, phase string) (Attempt, bool) {
	e, cfg := r.e, r.e.cfg
	r.calm.Store(in.Index, true)
	n := len(in.Attempts) + 1
	key := p.Key
	if cfg.Bug != nil && cfg.Bug.NewKeyPerAttempt {
		key = cfg.AttemptKey(p, n)
	}
	c := r.client(in.Index, p, []string{r.urls[cfg.Instance(in.Index, n)]}, 1, nil)
	c.FirstAttempt = n
	start := e.since()
	out, err := c.Send(bank.WithIntent(ctx, p.Label), client.Intent{Key: key, Transfer: p.Request, Label: p.Label})
	if err != nil || len(out.Attempts) == 0 {
		return Attempt{}, false
	}
	a := r.attemptOf(out.Attempts[0], n, phase, "", start, e.since())
	a.Reordered = r.reordered(p, n)
	in.Attempts = append(in.Attempts, a)
	return a, true
}

// repeat sends a settled intent once more: a user tapping again, or a retry
// after the cleanup job ran.
func (r *httpRig) repeat(ctx context.Context, in *Intent, p Planned, phase string) {
	_, _ = r.sendOnce(ctx, in, p, phase)
}

// sendClean sends in, no faults, until it has a final answer: a key reuse
// that waited for its first intent to settle.
func (r *httpRig) sendClean(ctx context.Context, in *Intent) {
	p := r.e.plan(in.Index)
	if r.target != nil {
		// Someone else's server gets Settle, however slow its answers.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.target.Settle+r.target.LockTTL)
		defer cancel()
	}
	for k := 0; k < HealAttempts && in.Outcome == SeenUnknown && ctx.Err() == nil; k++ {
		a, ok := r.sendOnce(ctx, in, p, PhaseHeal)
		if !ok {
			return
		}
		in.Outcome = a.Seen
		r.pause(a, k)
	}
}

// heal settles an unknown intent with no faults, as a client that comes
// back later does: it asks what became of its key (GET /transfers?key=) and
// takes the stored answer; when no request with the key arrived, or it is
// still in progress, it sends the intent again with the same key. A client
// with the new-key-per-attempt bug just sends again with a new key, and a
// client that reused another intent's key sends again too: the stored
// answer under that key is the other intent's.
func (r *httpRig) heal(ctx context.Context, in *Intent) {
	e, cfg := r.e, r.e.cfg
	p := e.plan(in.Index)
	if cfg.Bug != nil && cfg.Bug.NewKeyPerAttempt || in.Reuse != "" || r.target != nil {
		// A target's lookup is optional and spelt its own way: its client
		// sends the intent again with the same key, as the lesson's does.
		r.sendClean(ctx, in)
		return
	}
	for k := 0; k < HealAttempts && in.Outcome == SeenUnknown && ctx.Err() == nil; k++ {
		n := len(in.Attempts) + 1
		url := r.urls[cfg.Instance(in.Index, n)]
		c := r.client(in.Index, p, []string{url}, 1, nil)
		start := e.since()
		resp, found, err := c.Resolve(ctx, p.Key)
		if ctx.Err() != nil {
			return
		}
		if err != nil || found && resp.Status != 409 {
			at := Attempt{N: n, Phase: PhaseHeal, Key: p.Key, Instance: r.index[url], StartNs: start, EndNs: e.since(), Lookup: true}
			r.see(&at, resp, err)
			in.Attempts = append(in.Attempts, at)
			in.Outcome = at.Seen
			if in.Outcome != SeenUnknown {
				return
			}
			time.Sleep(httpBaseDelay)
			continue
		}
		// Never arrived (404), or still in progress (409): send it.
		a, ok := r.sendOnce(ctx, in, p, PhaseHeal)
		if !ok {
			return
		}
		in.Outcome = a.Seen
		backoff(a)
	}
}
