package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// ConnFault fails one HTTP exchange on real sockets, between a client and a
// server, in the Proxy. It decides whether the request reaches the server and
// what, if anything, the client gets back.
type ConnFault interface {
	// Name is the fault's registered name.
	Name() string
	// Exchange carries x, failing in its own way.
	Exchange(ctx context.Context, env *Env, x *Exchange) error
}

// AttemptHeader is the header in which a client numbers its attempts, so that
// a rule can fire on, say, attempt 1 only. The proxy cannot see attempts
// otherwise: to it, every request is new.
const AttemptHeader = "X-Bank-Sim-Attempt"

var (
	connRegistryMu sync.Mutex
	connRegistry   = map[string]func() ConnFault{}
)

// RegisterConn makes a connection fault available by name. Each conn_*.go
// file registers its own.
func RegisterConn(name string, make func() ConnFault) {
	connRegistryMu.Lock()
	defer connRegistryMu.Unlock()
	if _, dup := connRegistry[name]; dup {
		panic("faults: connection fault " + name + " registered twice")
	}
	connRegistry[name] = make
}

// NewConn returns a fresh connection fault by name, with default settings.
func NewConn(name string) (ConnFault, error) {
	connRegistryMu.Lock()
	make, ok := connRegistry[name]
	connRegistryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown connection fault %q (known: %v)", name, ConnNames())
	}
	return make(), nil
}

// ConnNames lists the registered connection faults, sorted.
func ConnNames() []string {
	connRegistryMu.Lock()
	defer connRegistryMu.Unlock()
	names := make([]string, 0, len(connRegistry))
	for n := range connRegistry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ConnRule says when a connection fault fires: on which attempts (all when
// empty; a request without AttemptHeader is attempt 0) and with what
// probability (always when zero).
type ConnRule struct {
	Fault       ConnFault
	Attempts    []int
	Probability float64
}

// Proxy is a TCP proxy on 127.0.0.1 that speaks just enough HTTP/1.1 to fail
// one exchange at a time. It serves one request per connection and closes it,
// so every attempt of a client travels on a fresh connection and a fault on
// one attempt never leaks into the next.
type Proxy struct {
	// Env holds the seeded generator every random choice comes from; its Note
	// hears what the client cannot see.
	Env *Env
	// Select, when set, picks the fault for each request before the rules
	// are consulted (nil: no fault from Select). A harness that plans its
	// faults ahead, from (seed, intent, attempt), decides here instead of
	// drawing from Env. Set it before the first request arrives.
	Select func(attempt int, req *http.Request) ConnFault

	upstream string
	ln       net.Listener
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu        sync.Mutex
	rules     []ConnRule
	overrides []ConnRule
	fired     map[string]int
	conns     map[net.Conn]struct{}
}

// StartProxy listens on a free port of 127.0.0.1 and relays to upstream
// ("127.0.0.1:8080"). Its random choices all come from seed.
func StartProxy(upstream string, seed uint64) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		Env:      NewEnv(seed, nil),
		upstream: upstream,
		ln:       ln,
		ctx:      ctx,
		cancel:   cancel,
		fired:    map[string]int{},
		conns:    map[net.Conn]struct{}{},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL is the proxy's base URL, to give the client instead of the server's.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Inject adds a rule.
func (p *Proxy) Inject(r ConnRule) *Proxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, r)
	return p
}

// On is a shorthand for a fault that always fires on the given attempts.
func (p *Proxy) On(f ConnFault, attempts ...int) *Proxy {
	return p.Inject(ConnRule{Fault: f, Attempts: attempts})
}

// Fired reports how often each fault fired.
func (p *Proxy) Fired() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.fired))
	for k, v := range p.fired {
		out[k] = v
	}
	return out
}

// Close stops accepting, cuts every open connection (a held response is
// released), and waits for every exchange to end.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.cancel()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() {
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				_ = c.Close()
			}()
			p.serve(c)
		}()
	}
}

// serve handles the one exchange of a connection.
func (p *Proxy) serve(c net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		return
	}
	attempt, _ := strconv.Atoi(req.Header.Get(AttemptHeader))
	x := &Exchange{Attempt: attempt, Request: req, Body: body, client: c, upstream: p.upstream, proxy: p}
	var f ConnFault
	if p.Select != nil {
		if f = p.Select(attempt, req); f != nil {
			p.mu.Lock()
			p.fired[f.Name()]++
			p.mu.Unlock()
		}
	}
	if f == nil {
		f = p.pick(attempt)
	}
	if f == nil {
		_ = x.Forward(p.ctx)
		return
	}
	x.fault = f.Name()
	if err := f.Exchange(p.ctx, p.Env, x); err != nil {
		p.Env.note("proxy: %s on attempt %d: %v", f.Name(), attempt, err)
	}
}

// Override adds rules that take precedence over every other and silence the
// other rules of the same fault, as Network.Override does.
func (p *Proxy) Override(rules ...ConnRule) *Proxy {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.overrides = append(p.overrides, rules...)
	return p
}

func (p *Proxy) pick(attempt int) ConnFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	overridden := map[string]bool{}
	for _, r := range p.overrides {
		overridden[r.Fault.Name()] = true
	}
	for i, r := range append(slices.Clip(p.overrides), p.rules...) {
		if i >= len(p.overrides) && overridden[r.Fault.Name()] {
			continue
		}
		if len(r.Attempts) > 0 && !slices.Contains(r.Attempts, attempt) {
			continue
		}
		// Draw only for probabilistic rules, as Network does, so that adding
		// a certain fault does not shift every later random choice.
		if r.Probability > 0 && p.Env.Float64() >= r.Probability {
			continue
		}
		p.fired[r.Fault.Name()]++
		return r.Fault
	}
	return nil
}

// Exchange is one request in the proxy: what the client sent, and the means
// to pass it on and to answer, or not.
type Exchange struct {
	Attempt int
	Request *http.Request
	Body    []byte

	client   net.Conn
	upstream string
	proxy    *Proxy
	fault    string // the fault carrying this exchange
}

// Note reports something the client cannot see: what the exchange's fault
// did, on the network between the client and the server.
func (x *Exchange) Note(format string, args ...any) {
	x.proxy.Env.strike(x.fault, LaneNetwork, format, args...)
}

// maxAnswer is the most of an answer the proxy reads.
const maxAnswer = 16 << 20

// RoundTrip sends the request to the server and reads its whole answer. When
// it returns without error the server has finished: for a transfer, the
// transaction has committed or rolled back.
func (x *Exchange) RoundTrip(ctx context.Context) (*http.Response, []byte, error) {
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", x.upstream)
	if err != nil {
		return nil, nil, err
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { _ = up.Close() })
	defer stop()
	req := x.Request
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	req.ContentLength = int64(len(x.Body))
	req.TransferEncoding = nil
	req.Close = true
	if err := req.Write(up); err != nil {
		return nil, nil, err
	}
	res, err := http.ReadResponse(bufio.NewReader(up), req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	// The server is bank-sim's own handler, but the proxy holds the whole
	// answer in memory: bound it, as every read is.
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, nil, err
	}
	if len(body) > maxAnswer {
		return nil, nil, fmt.Errorf("the server's answer is over %d MiB; a transfer's answer is a few hundred bytes", maxAnswer>>20)
	}
	return res, body, nil
}

// Send passes the whole request on to the server on a new connection and
// returns that connection, for a fault that decides itself what happens to
// it next. The caller closes it.
func (x *Exchange) Send(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", x.upstream)
	if err != nil {
		return nil, err
	}
	req := x.Request
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	req.ContentLength = int64(len(x.Body))
	req.TransferEncoding = nil
	req.Close = true
	if err := req.Write(up); err != nil {
		_ = up.Close()
		return nil, err
	}
	return up, nil
}

// Reply sends a response to the client, whole.
func (x *Exchange) Reply(res *http.Response, body []byte) error {
	_, err := x.client.Write(encodeResponse(res, body))
	return err
}

// ReplyPartial sends the response's head and only keep bytes of its body,
// which still announces its full length, then closes the connection.
func (x *Exchange) ReplyPartial(res *http.Response, body []byte, keep int) error {
	raw := encodeResponse(res, body)
	cut := len(body) - min(max(keep, 0), len(body))
	_, err := x.client.Write(raw[:len(raw)-cut])
	_ = x.client.Close()
	return err
}

// Forward relays the exchange unharmed.
func (x *Exchange) Forward(ctx context.Context) error {
	res, body, err := x.RoundTrip(ctx)
	if err != nil {
		// The server could not be reached: what a load balancer answers.
		return x.Answer(502, "bad_gateway", "The proxy could not reach the server", 0)
	}
	return x.Reply(res, body)
}

// Drop closes the client's connection without a word: the client sees the
// connection end (EOF) where the answer should be.
func (x *Exchange) Drop() error { return x.client.Close() }

// Reset aborts the client's connection with a TCP RST (linger 0): the client
// sees "connection reset by peer".
func (x *Exchange) Reset() error {
	if tc, ok := x.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return x.client.Close()
}

// WaitForClientToGiveUp blocks until the client closes its end (its timeout
// fired), the proxy closes, or max passes. No answer is sent meanwhile.
func (x *Exchange) WaitForClientToGiveUp(ctx context.Context, max time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The client sent its whole request already, so the next read
		// returns only when it closes the connection (or we do).
		_, _ = io.Copy(io.Discard, x.client)
	}()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
	_ = x.client.Close()
	<-done
}

func encodeResponse(res *http.Response, body []byte) []byte {
	out := *res
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	out.TransferEncoding = nil
	out.Close = true
	out.Header = res.Header.Clone()
	out.Header.Del("Connection")
	var buf bytes.Buffer
	_ = out.Write(&buf)
	return buf.Bytes()
}

// Answer replies from the proxy itself with problem details, as a load
// balancer in front of the servers would; retryAfter > 0 adds Retry-After.
func (x *Exchange) Answer(status int, code, detail string, retryAfter int) error {
	body, _ := json.Marshal(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail, "code": code,
	})
	h := http.Header{}
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	res := &http.Response{StatusCode: status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h}
	return x.Reply(res, body)
}

// summarize is a server's answer as a note prints it: "transfer 1" for a
// receipt, the error code for a refusal.
func summarize(body []byte) string {
	var v struct {
		TransferID int64  `json:"transferId"`
		Code       string `json:"code"`
	}
	_ = json.Unmarshal(body, &v)
	switch {
	case v.TransferID != 0:
		return fmt.Sprintf("transfer %d", v.TransferID)
	case v.Code != "":
		return v.Code
	}
	return ""
}
