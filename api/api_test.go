package api_test

import (
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// newBank is a fresh bank of pgtest.MixedAccounts with a pool of conns
// connections: no account id equals its owner's user id, Ada (user 1) and
// Bola (user 2) own two accounts each (11, 12; 21, 22 closed), Chidi's 31 is
// frozen, and account 2 is user 4's. An ownership check that compares the
// wrong column passes on the lesson's bank, where account n is user n's.
func newBank(t testing.TB, conns int32) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewBankWith(t, pgtest.BankOptions{MaxConns: conns, Accounts: pgtest.MixedAccounts})
}

// testTokens are the demo tokens and token-dayo, user 4, who owns account 2.
func testTokens() map[string]int64 {
	m := api.DemoTokens()
	m["token-dayo"] = 4
	return m
}

// newServer serves the API on a real loopback socket over a fresh bank, and
// checks the bank's invariants when the test ends.
func newServer(t testing.TB, conns int32) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := newBank(t, conns)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	srv := httptest.NewServer(api.NewServer(api.Config{Handler: h, Tokens: testTokens(), Log: t.Logf}))
	t.Cleanup(func() {
		srv.Close()
		l, err := bank.ReadLedger(context.Background(), pool)
		if err != nil {
			t.Error(err)
			return
		}
		for _, c := range bank.CheckInvariants(pgtest.MixedAccounts, l, nil) {
			if !c.OK {
				t.Errorf("invariant %s: %s", c.Name, c.Detail)
			}
		}
	})
	return srv, pool
}

type answer struct {
	status  int
	header  http.Header
	body    string
	problem api.Problem
}

func do(t testing.TB, method, url string, h map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, header: res.Header, body: string(b)}
	if res.Header.Get("Content-Type") == api.ProblemType {
		if err := json.Unmarshal(b, &a.problem); err != nil {
			t.Fatalf("problem+json that is not JSON: %s", b)
		}
	}
	return a
}

func post(token, key string) map[string]string {
	h := map[string]string{"Content-Type": "application/json"}
	if token != "" {
		h["Authorization"] = "Bearer " + token
	}
	if key != "" {
		h[api.HeaderKey] = key
	}
	return h
}

func counts(t testing.TB, pool *pgxpool.Pool) (keys, transfers int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM transfers)").Scan(&keys, &transfers); err != nil {
		t.Fatal(err)
	}
	return keys, transfers
}

func TestPostTransfer(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 8)
	body := `{"from":11,"to":21,"amountKobo":1000000}`
	const key = "key-0000000000000001"

	t.Run("Created", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), body)
		if a.status != 201 || a.header.Get(api.HeaderReplayed) != "" || a.header.Get("Location") != "/transfers/1" {
			t.Fatalf("got %d %v %s", a.status, a.header, a.body)
		}
	})
	t.Run("ReplayedWithTheOriginalReceipt", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), `{"amountKobo":1000000, "to":21, "from":11}`)
		var rc bank.Receipt
		_ = json.Unmarshal([]byte(a.body), &rc)
		if a.status != 201 || a.header.Get(api.HeaderReplayed) != "true" || rc != (bank.Receipt{TransferID: 1, From: 11, To: 21, AmountKobo: 1_000_000, BalanceKobo: 4_000_000}) {
			t.Fatalf("got %d %v %s", a.status, a.header, a.body)
		}
	})
	t.Run("KeyReusedForAnotherBody", func(t *testing.T) {
		a := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), `{"from":11,"to":21,"amountKobo":5}`)
		if a.status != 422 || a.problem.Code != idem.CodeKeyReused || a.problem.Status != 422 {
			t.Fatalf("got %d %s", a.status, a.body)
		}
	})
	t.Run("ResolveByKey", func(t *testing.T) {
		a := do(t, "GET", srv.URL+"/transfers?key="+key, post("token-ada", ""), "")
		if a.status != 201 || a.header.Get(api.HeaderReplayed) != "true" {
			t.Fatalf("got %d %s", a.status, a.body)
		}
		// Keys are scoped to their user: Bola learns nothing about Ada's.
		a = do(t, "GET", srv.URL+"/transfers?key="+key, post("token-bola", ""), "")
		if a.status != 404 || a.problem.Code != api.CodeUnknownKey {
			t.Fatalf("Bola got %d %s", a.status, a.body)
		}
	})
	t.Run("TransferAndAccountOwnerOnly", func(t *testing.T) {
		if a := do(t, "GET", srv.URL+"/transfers/1", post("token-ada", ""), ""); a.status != 200 {
			t.Errorf("Ada: %d %s", a.status, a.body)
		}
		if a := do(t, "GET", srv.URL+"/transfers/1", post("token-bola", ""), ""); a.status != 404 {
			t.Errorf("Bola: %d %s", a.status, a.body)
		}
		if a := do(t, "GET", srv.URL+"/accounts/11", post("token-ada", ""), ""); a.status != 200 || !strings.Contains(a.body, `"balanceKobo":4000000`) {
			t.Errorf("Ada's account: %d %s", a.status, a.body)
		}
		if a := do(t, "GET", srv.URL+"/accounts/11", post("token-bola", ""), ""); a.status != 404 || a.problem.Code != bank.CodeAccountNotFound {
			t.Errorf("Bola on Ada's account: %d %s", a.status, a.body)
		}
	})
	t.Run("InProgressIs409WithRetryAfter", func(t *testing.T) {
		const held = "key-held-0000000001"
		b := `{"from":11,"to":21,"amountKobo":7}`
		if _, err := (&idem.Store{}).Begin(context.Background(), pool, 1, held, idem.Fingerprint(idem.Method, idem.Path, []byte(b)), time.Now()); err != nil {
			t.Fatal(err)
		}
		a := do(t, "POST", srv.URL+"/transfers", post("token-ada", held), b)
		if a.status != 409 || a.header.Get(api.HeaderRetryAfter) != "1" || a.problem.Code != idem.CodeInProgress {
			t.Fatalf("got %d %v %s", a.status, a.header, a.body)
		}
	})
	t.Run("Healthz", func(t *testing.T) {
		if a := do(t, "GET", srv.URL+"/healthz", nil, ""); a.status != 200 {
			t.Fatalf("got %d %s", a.status, a.body)
		}
	})
	t.Run("WrongMethodIsProblem", func(t *testing.T) {
		a := do(t, "DELETE", srv.URL+"/transfers", post("token-ada", ""), "")
		if a.status != 405 || a.problem.Code != api.CodeMethodNotAllowed || a.header.Get("Allow") == "" {
			t.Fatalf("got %d %v %s", a.status, a.header, a.body)
		}
	})
}

// malformed are requests that must be refused before the database is touched.
var malformed = []struct {
	name, token, ctype, body string
	noKey                    bool
	status                   int
	code                     string
}{
	{name: "NoToken", body: `{"from":11,"to":21,"amountKobo":1}`, status: 401, code: api.CodeUnauthorized},
	{name: "BadToken", token: "token-ad", body: `{"from":11,"to":21,"amountKobo":1}`, status: 401, code: api.CodeUnauthorized},
	{name: "NoKey", noKey: true, body: `{"from":11,"to":21,"amountKobo":1}`, status: 400, code: idem.CodeKeyRequired},
	{name: "TextPlain", ctype: "text/plain", body: `{"from":11,"to":21,"amountKobo":1}`, status: 415, code: api.CodeUnsupportedMedia},
	{name: "NoContentType", ctype: "-", body: `{"from":11,"to":21,"amountKobo":1}`, status: 415, code: api.CodeUnsupportedMedia},
	{name: "TooLarge", body: `{"from":11,"to":21,"amountKobo":1}` + strings.Repeat(" ", 2000), status: 413, code: api.CodeBodyTooLarge},
	{name: "Empty", body: ``, status: 400, code: bank.CodeInvalidRequest},
	{name: "Array", body: `[1,2,3]`, status: 400, code: bank.CodeInvalidRequest},
	{name: "UnknownMember", body: `{"from":11,"to":21,"amountKobo":1,"note":"hi"}`, status: 400, code: bank.CodeInvalidRequest},
	{name: "CaseVariant", body: `{"FROM":1,"to":21,"amountKobo":1}`, status: 400, code: bank.CodeInvalidRequest},
	{name: "Duplicate", body: `{"from":11,"to":21,"amountKobo":1,"amountKobo":2}`, status: 400, code: bank.CodeInvalidRequest},
	{name: "Trailing", body: `{"from":11,"to":21,"amountKobo":1} x`, status: 400, code: bank.CodeInvalidRequest},
	{name: "SecondObject", body: `{"from":11,"to":21,"amountKobo":1}{}`, status: 400, code: bank.CodeInvalidRequest},
	{name: "AmountString", body: `{"from":11,"to":21,"amountKobo":"1"}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountFloat", body: `{"from":11,"to":21,"amountKobo":1.5}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountWholeFloat", body: `{"from":11,"to":21,"amountKobo":1.0}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountExponent", body: `{"from":11,"to":21,"amountKobo":1e3}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountNegative", body: `{"from":11,"to":21,"amountKobo":-1}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountZero", body: `{"from":11,"to":21,"amountKobo":0}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountOverflow", body: `{"from":11,"to":21,"amountKobo":99999999999999999999}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountAboveSafe", body: `{"from":11,"to":21,"amountKobo":9007199254740992}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountNull", body: `{"from":11,"to":21,"amountKobo":null}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "AmountMissing", body: `{"from":11,"to":21}`, status: 400, code: bank.CodeInvalidAmount},
	{name: "FromString", body: `{"from":"1","to":21,"amountKobo":1}`, status: 400, code: bank.CodeInvalidAccount},
	{name: "ToNegative", body: `{"from":11,"to":-2,"amountKobo":1}`, status: 400, code: bank.CodeInvalidAccount},
}

func TestMalformedRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 8)
	for i, c := range malformed {
		t.Run(c.name, func(t *testing.T) {
			h := post(c.token, "key-malformed-"+strings.Repeat("0", 4)+string(rune('a'+i%26))+"x")
			if c.token == "" && c.status != 401 {
				h["Authorization"] = "Bearer token-ada"
			}
			if c.noKey {
				delete(h, api.HeaderKey)
			}
			switch c.ctype {
			case "-":
				delete(h, "Content-Type")
			case "":
			default:
				h["Content-Type"] = c.ctype
			}
			a := do(t, "POST", srv.URL+"/transfers", h, c.body)
			if a.status != c.status || a.problem.Code != c.code || a.problem.Status != c.status || a.header.Get("Content-Type") != api.ProblemType {
				t.Errorf("got %d %q %s, want %d %s", a.status, a.header.Get("Content-Type"), a.body, c.status, c.code)
			}
		})
	}
	if keys, transfers := counts(t, pool); keys != 0 || transfers != 0 {
		t.Fatalf("malformed requests wrote %d keys and %d transfers", keys, transfers)
	}
}

// FuzzDecodeTransfer checks, for any body, that the strict decoder and the
// fingerprint agree (an accepted body fingerprints like its canonical form),
// and that a body the decoder refuses never writes a row through the API.
func FuzzDecodeTransfer(f *testing.F) {
	for _, c := range malformed {
		f.Add(c.body)
	}
	f.Add(`{"from":11,"to":21,"amountKobo":1}`)
	f.Add(`{ "amountKobo" : 100 , "to":21,"from":11 }`)
	f.Add(`{"from":11,"to":21,"amountKobo":1,"\u0066rom":11}`)
	srv, pool := newServer(f, 4)
	n := 0
	f.Fuzz(func(t *testing.T, body string) {
		req, derr := api.DecodeTransfer([]byte(body))
		if derr == nil {
			// Accepted: the handler's lenient parser must read the same
			// request, and every spelling must fingerprint the same.
			parsed, refusal := bank.ParseTransferRequest([]byte(body))
			if refusal != nil || parsed != req {
				t.Fatalf("decoder read %+v, bank read %+v (%v)", req, parsed, refusal)
			}
			if idem.Fingerprint(idem.Method, idem.Path, []byte(body)) != idem.Fingerprint(idem.Method, idem.Path, req.Body()) {
				t.Fatalf("%q fingerprints unlike its canonical form", body)
			}
			return
		}
		n++
		key := "fuzz-key-" + strings.Repeat("0", 8) + strconv.Itoa(n)
		_, before := counts(t, pool)
		a := do(t, "POST", srv.URL+"/transfers", post("token-ada", key), body)
		if a.status != 400 && a.status != 413 {
			t.Fatalf("refused body %q answered %d %s", body, a.status, a.body)
		}
		var keys int
		_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys WHERE key = $1", key).Scan(&keys)
		if _, after := counts(t, pool); keys != 0 || after != before {
			t.Fatalf("refused body %q wrote a row (keys %d, transfers %d→%d)", body, keys, before, after)
		}
	})
}

// newClient returns a retrying client over urls that does not really sleep.
func newClient(token string, urls ...string) (*client.Client, *[]time.Duration) {
	var waits []time.Duration
	return &client.Client{
		URLs:  urls,
		Token: token,
		HTTP:  &http.Client{Timeout: 30 * time.Second}, // a bound: no test waits it out
		Rand:  rand.New(rand.NewPCG(1, 2)),
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil },
	}, &waits
}

func proxyTo(t *testing.T, srv *httptest.Server) *faults.Proxy {
	t.Helper()
	p, err := faults.StartProxy(strings.TrimPrefix(srv.URL, "http://"), 7)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestClientThroughConnectionFaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		fault    faults.ConnFault
		replayed bool // the server acted on attempt 1
	}{
		{"Tunnel", &faults.Tunnel{}, true},
		{"Reset", &faults.Reset{}, false},
		{"Hold", &faults.Hold{Max: time.Minute}, true},
		{"Unavailable", &faults.Unavailable{RetryAfter: 2}, false},
		{"Truncate", &faults.Truncate{Keep: 0.5}, true},
		{"Latency", &faults.Latency{Latency: time.Millisecond, Jitter: time.Millisecond}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv, pool := newServer(t, 4)
			p := proxyTo(t, srv).On(c.fault, 1)
			cl, waits := newClient("token-ada", p.URL())
			if c.name == "Hold" {
				// The client gives up on attempt 1 once the proxy holds the
				// server's answer: a response slower than its timeout. A
				// timer instead (it was 200 ms) could end the attempt while
				// the server was still working on a loaded machine, and the
				// retry was then told 409.
				held := make(chan struct{})
				var once sync.Once
				p.Env.Struck = func(faults.Strike) { once.Do(func() { close(held) }) }
				cl.HTTP = &http.Client{Timeout: time.Minute, Transport: &giveUpFirst{held: held, base: http.DefaultTransport}}
			}
			out, err := cl.Send(context.Background(), cl.NewIntent(bank.TransferRequest{From: 11, To: 21, AmountKobo: 500}))
			if err != nil {
				t.Fatal(err)
			}
			if out.Kind != client.OK || out.Response.Status != 201 {
				t.Fatalf("outcome %v %d, attempts %+v", out.Kind, out.Response.Status, out.Attempts)
			}
			wantAttempts := 2
			if c.name == "Latency" {
				wantAttempts = 1 // slow, but answered
			}
			if len(out.Attempts) != wantAttempts || out.Response.Replayed != c.replayed {
				t.Fatalf("%d attempts, replayed %v; want %d, %v", len(out.Attempts), out.Response.Replayed, wantAttempts, c.replayed)
			}
			if c.name == "Unavailable" && (*waits)[0] != 2*time.Second {
				t.Errorf("Retry-After: 2 not honoured: waited %v", *waits)
			}
			if _, transfers := counts(t, pool); transfers != 1 {
				t.Fatalf("%d transfers, want 1", transfers)
			}
			if p.Fired()[c.fault.Name()] != 1 {
				t.Errorf("fired %v", p.Fired())
			}
		})
	}
}

// giveUpFirst ends the first request it carries when held closes, as a
// client whose timeout ran out; the others it carries as they are.
type giveUpFirst struct {
	held <-chan struct{}
	base http.RoundTripper
	sent atomic.Int32
}

func (g *giveUpFirst) RoundTrip(req *http.Request) (*http.Response, error) {
	if g.sent.Add(1) > 1 {
		return g.base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancel(req.Context())
	go func() {
		select {
		case <-g.held:
		case <-ctx.Done():
		}
		cancel()
	}()
	return g.base.RoundTrip(req.WithContext(ctx))
}

func TestClientGivesUpAsUnknownAndResolves(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 4)
	p := proxyTo(t, srv).On(&faults.Tunnel{}) // every attempt's answer is lost
	cl, waits := newClient("token-ada", p.URL())
	in := cl.NewIntent(bank.TransferRequest{From: 11, To: 21, AmountKobo: 500})
	out, err := cl.Send(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != client.Unknown || len(out.Attempts) != client.DefaultAttempts {
		t.Fatalf("outcome %v after %d attempts", out.Kind, len(out.Attempts))
	}
	// Backoff: 50 ms·2^(n-1) plus under 50 ms of jitter, and no wait after the last.
	if len(*waits) != client.DefaultAttempts-1 {
		t.Fatalf("waits %v", *waits)
	}
	for i, w := range *waits {
		lo := client.DefaultBaseDelay << i
		if w < lo || w >= lo+client.DefaultBaseDelay {
			t.Errorf("wait %d = %v, want [%v, %v)", i+1, w, lo, lo+client.DefaultBaseDelay)
		}
	}
	direct, _ := newClient("token-ada", srv.URL)
	resp, found, err := direct.Resolve(context.Background(), in.Key)
	if err != nil || !found || resp.Status != 201 || !resp.Replayed {
		t.Fatalf("resolve: %v %v %+v", err, found, resp)
	}
	if _, transfers := counts(t, pool); transfers != 1 {
		t.Fatalf("%d transfers, want 1", transfers)
	}
	_, found, err = direct.Resolve(context.Background(), "never-sent-00000000")
	if err != nil || found {
		t.Fatalf("an unknown key: found %v, %v", found, err)
	}
}

func TestShouldRetry(t *testing.T) {
	want := map[int]bool{0: true, 201: false, 400: false, 409: true, 422: false, 429: true, 500: true, 503: true}
	for status, w := range want {
		if got := client.ShouldRetry(status); got != w {
			t.Errorf("ShouldRetry(%d) = %v, want %v", status, got, w)
		}
	}
}
