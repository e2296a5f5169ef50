package probe_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/probe"
)

// payments is a transfer API that is not bank-sim: written separately, on
// plain net/http, with its money and its keys in maps, and spelt its own
// way (POST /v1/payments, X-Idempotency-Key, "Authorization: Token …",
// {"source","destination","amount"} with string account ids, and the answer
// nested as {"payment":{"id":"pay_7","sourceBalance":…}}). The probe must
// find its flaws from the outside, through flags only.
type payments struct {
	flaws paymentFlaws
	// work stands for the database round trips of a real transfer: the
	// time during which a race between two copies of a request is open.
	work time.Duration

	mu       sync.Mutex
	balances map[string]int64
	owners   map[string]string // account → token
	keys     map[string]*payment
	next     int
}

type paymentFlaws struct {
	// checkThenInsert looks the key up, does the work, and only then
	// records the key: two copies that arrive together both find nothing
	// and both pay.
	checkThenInsert bool
	// noFingerprint replays a key's answer whatever the request is now.
	noFingerprint bool
	// noBalance leaves the sender's balance out of the answer.
	noBalance bool
	// optionalKey makes a request without a key a plain, unprotected
	// transfer, as many APIs do.
	optionalKey bool
	// noOwnerCheck lets any signed-in user pay from any account.
	noOwnerCheck bool
	// jsonbReplay stores the answer as PostgreSQL's jsonb would and replays
	// that: the same JSON value, its members in jsonb's order and spaced.
	jsonbReplay bool
	// busyIs500 answers a copy that arrives while its key is in progress
	// with a 500 instead of 409.
	busyIs500 bool
}

type payment struct {
	hash   [32]byte
	done   bool
	status int
	body   []byte
}

func newPayments(f paymentFlaws) *payments {
	return &payments{
		flaws:    f,
		work:     time.Millisecond,
		balances: map[string]int64{"acc_ada": 5_000_000, "acc_bola": 500_000, "acc_chidi": 2_000_000},
		owners:   map[string]string{"acc_ada": "tok_ada", "acc_bola": "tok_bola", "acc_chidi": "tok_chidi"},
		keys:     map[string]*payment{},
	}
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Token ")
	if !ok || !p.knownToken(token) {
		reply(w, 401, map[string]string{"error": "unauthenticated"})
		return
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/v1/payments":
		p.pay(w, r, token)
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/v1/accounts/"):
		acct := strings.TrimPrefix(r.URL.Path, "/v1/accounts/")
		p.mu.Lock()
		bal, exists := p.balances[acct]
		owner := p.owners[acct]
		p.mu.Unlock()
		if !exists || owner != token {
			reply(w, 404, map[string]string{"error": "no_such_account"})
			return
		}
		reply(w, 200, map[string]any{"account": map[string]any{"id": acct, "balance": bal}})
	default:
		reply(w, 404, map[string]string{"error": "no_route"})
	}
}

func (p *payments) knownToken(t string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.owners {
		if o == t {
			return true
		}
	}
	return false
}

func (p *payments) pay(w http.ResponseWriter, r *http.Request, token string) {
	key := r.Header.Get("X-Idempotency-Key")
	if key == "" && !p.flaws.optionalKey {
		reply(w, 400, map[string]string{"error": "missing_idempotency_key"})
		return
	}
	var req struct {
		Source, Destination string
		Amount              int64
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil || json.Unmarshal(raw, &req) != nil || req.Amount <= 0 {
		reply(w, 400, map[string]string{"error": "bad_request"})
		return
	}
	canon, _ := json.Marshal(req) // the same request however its members are ordered
	hash := sha256.Sum256(canon)
	scoped := token + "\x00" + key
	if key == "" {
		status, body := p.move(token, req.Source, req.Destination, req.Amount)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}

	p.mu.Lock()
	if entry, ok := p.keys[scoped]; ok {
		seen := *entry // read under the lock; the holder completes it under the lock
		p.mu.Unlock()
		switch {
		case seen.hash != hash && !p.flaws.noFingerprint:
			reply(w, 422, map[string]string{"error": "key_reused"})
		case !seen.done && p.flaws.busyIs500:
			reply(w, 500, map[string]string{"error": "internal"})
		case !seen.done:
			w.Header().Set("Retry-After", "1")
			reply(w, 409, map[string]string{"error": "in_progress"})
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(seen.status)
			_, _ = w.Write(seen.body)
		}
		return
	}
	entry := &payment{hash: hash}
	if !p.flaws.checkThenInsert {
		p.keys[scoped] = entry
	}
	p.mu.Unlock()

	time.Sleep(p.work)
	status, body := p.move(token, req.Source, req.Destination, req.Amount)

	stored := body
	if p.flaws.jsonbReplay {
		stored = jsonbText(body)
	}
	p.mu.Lock()
	entry.done, entry.status, entry.body = true, status, stored
	p.keys[scoped] = entry
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// move is the transfer itself, atomic under the lock.
func (p *payments) move(token, from, to string, amount int64) (int, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	body := func(v any) []byte { b, _ := json.Marshal(v); return b }
	if _, ok := p.owners[from]; !ok || p.owners[from] != token && !p.flaws.noOwnerCheck {
		return 404, body(map[string]string{"error": "no_such_account"})
	}
	if _, ok := p.balances[to]; !ok || to == "acc_chidi" || to == from {
		return 422, body(map[string]string{"error": "bad_destination"})
	}
	if p.balances[from] < amount {
		return 422, body(map[string]string{"error": "insufficient_funds"})
	}
	p.balances[from] -= amount
	p.balances[to] += amount
	p.next++
	pay := map[string]any{"id": fmt.Sprintf("pay_%d", p.next), "amount": amount}
	if !p.flaws.noBalance {
		pay["sourceBalance"] = p.balances[from]
	}
	return 201, body(map[string]any{"payment": pay})
}

func (p *payments) total() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t int64
	for _, b := range p.balances {
		t += b
	}
	return t
}

// jsonbText is b as PostgreSQL prints it back from a jsonb column: an
// object's members shortest name first (then by bytes), ", " and ": "
// between them.
func jsonbText(b []byte) []byte {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return b
	}
	var out strings.Builder
	var write func(v any)
	write = func(v any) {
		obj, ok := v.(map[string]any)
		if !ok {
			e, _ := json.Marshal(v)
			out.Write(e)
			return
		}
		names := make([]string, 0, len(obj))
		for k := range obj {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool {
			if len(names[i]) != len(names[j]) {
				return len(names[i]) < len(names[j])
			}
			return names[i] < names[j]
		})
		out.WriteByte('{')
		for i, k := range names {
			if i > 0 {
				out.WriteString(", ")
			}
			e, _ := json.Marshal(k)
			out.Write(e)
			out.WriteString(": ")
			write(obj[k])
		}
		out.WriteByte('}')
	}
	write(v)
	return []byte(out.String())
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// paymentsProbe maps the probe onto the payments API with flags' worth of
// configuration, nothing else.
func paymentsProbe(url string) probe.Config {
	c := probe.Contract{
		Path:         "/v1/payments",
		KeyHeader:    "X-Idempotency-Key",
		AuthHeader:   "Authorization",
		AuthScheme:   "Token",
		FromField:    "source",
		ToField:      "destination",
		AmountField:  "amount",
		IDField:      "payment.id",
		BalanceField: "payment.sourceBalance",
	}
	return probe.Config{
		URLs:     []string{url},
		Contract: c,
		Payer:    probe.User{Name: "ada", Token: "tok_ada", Account: "acc_ada"},
		Payee:    probe.User{Name: "bola", Token: "tok_bola", Account: "acc_bola"},
		Third:    probe.User{Name: "chidi", Account: "acc_chidi"},
		Seed:     7,
		Timeout:  5 * time.Second,
		Settle:   3 * time.Second,
	}
}

func startPayments(t *testing.T, f paymentFlaws) (*payments, string) {
	t.Helper()
	p := newPayments(f)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func TestProbeFindsTheFlawsOfAServerThatIsNotBankSim(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		flaws paymentFlaws
		// fail are the checks that must fail; every other must pass.
		fail []string
		// may are checks that the same flaw can also fail, by chance of
		// timing; when one does, its reason must contain mayWhy (the flaw,
		// not another).
		may    []string
		mayWhy string
	}{
		// A hung-up request goes on at the server; its retry can race it
		// for the key exactly as a double tap does.
		{"check-then-insert race on the key", paymentFlaws{checkThenInsert: true}, []string{"double-tap", "storm"},
			[]string{"hang-up"}, "a transfer ran again"},
		{"no fingerprint", paymentFlaws{noFingerprint: true}, []string{"key-reused-amount", "key-reused-recipient"}, nil, ""},
		{"the key is optional", paymentFlaws{optionalKey: true}, []string{"no-key"}, nil, ""},
		{"any user pays from any account", paymentFlaws{noOwnerCheck: true}, []string{"no-token", "cross-user-replay"}, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, url := startPayments(t, tc.flaws)
			if tc.flaws.checkThenInsert {
				// The copies must meet inside the window between the
				// lookup and the insert; 1 ms of work is missed when the
				// machine is busy and the copies' goroutines start apart.
				p.work = 20 * time.Millisecond
			}
			rep := runProbe(t, paymentsProbe(url))
			want := map[string]bool{}
			for _, n := range tc.fail {
				want[n] = true
			}
			may := map[string]bool{}
			for _, n := range tc.may {
				may[n] = true
			}
			for _, c := range rep.Checks {
				switch {
				case may[c.Name] && c.Status == probe.Fail:
					if !strings.Contains(c.Reason, tc.mayWhy) {
						t.Errorf("%s: FAIL for another reason than the flaw (%q): %s", c.Name, tc.mayWhy, c.Reason)
					}
				case want[c.Name] && c.Status != probe.Fail:
					t.Errorf("%s: %s, want FAIL: the probe missed the flaw", c.Name, c.Status)
				case !want[c.Name] && c.Name != "other-copy" && !(uncheckedByDefault[c.Name] && c.Status == probe.Skipped) && c.Status != probe.Pass:
					t.Errorf("%s: %s, want PASS: %s", c.Name, c.Status, c.Reason)
				}
			}
			if t.Failed() {
				t.Log("\n" + dump(rep))
			}
			if p.total() != 7_500_000 {
				t.Errorf("the payments API holds %d in all; money was created or destroyed", p.total())
			}
		})
	}
}

// The same API with both flaws fixed passes every check it can be given,
// here with its balances read exactly through its own account endpoint and
// no balance in its answers.
func TestProbePassesTheFixedServerThatIsNotBankSim(t *testing.T) {
	t.Parallel()
	p, url := startPayments(t, paymentFlaws{noBalance: true})
	cfg := paymentsProbe(url)
	cfg.Contract.BalanceField = ""
	cfg.Balances = &probe.HTTPBalances{
		Template: url + "/v1/accounts/{id}",
		Field:    "account.balance",
		Owner:    cfg.Owner,
		Auth:     cfg.Contract,
		Timeout:  cfg.Timeout,
	}
	rep := runProbe(t, cfg)
	t.Log("\n" + dump(rep))
	for _, c := range rep.Checks {
		want := probe.Pass
		if c.Name == "other-copy" || uncheckedByDefault[c.Name] {
			want = probe.Skipped // one URL only; no --restart, no --db-proxy
		}
		if c.Status != want {
			t.Errorf("%s: %s, want %s: %s", c.Name, c.Status, want, c.Reason)
		}
	}
	if !rep.Capabilities.Exact || rep.Capabilities.Balance {
		t.Errorf("capabilities %+v: want exact balances and none in answers", rep.Capabilities)
	}
	if !rep.Restore.OK {
		t.Errorf("restore: %s", rep.Restore.Result)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.balances["acc_ada"] != 5_000_000 || p.balances["acc_bola"] != 500_000 {
		t.Errorf("after the restore, ada %d and bola %d; want them as they started", p.balances["acc_ada"], p.balances["acc_bola"])
	}
}

// A replay in other bytes (jsonb's, as the lesson's server.js stores it) is
// the same transfer to a JSON client: without the target's promise of exact
// replays the probe warns and passes; with it (--exact-replays) it fails. A
// server that replays its stored bytes draws neither.
func TestReplaysInOtherBytesAreWarnedAboutUnlessExactIsPromised(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		jsonb bool
		exact bool
		want  probe.Status
		says  string
	}{
		{"jsonb, no promise", true, false, probe.Pass, "⚠ the retry with the same key and body is not the first answer byte for byte: the same JSON value in other bytes"},
		{"jsonb, promised", true, true, probe.Fail, "✗ the retry with the same key and body is not the first answer byte for byte: the same JSON value in other bytes"},
		{"stored bytes, promised", false, true, probe.Pass, "✓ the retry with the same key and body is the first answer byte for byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startPayments(t, paymentFlaws{jsonbReplay: tc.jsonb})
			cfg := paymentsProbe(url)
			cfg.Contract.ExactReplays = tc.exact
			cfg.Only = []string{"replay", "lost-response"}
			rep := runProbe(t, cfg)
			for _, c := range rep.Checks {
				if c.Status != tc.want {
					t.Errorf("%s: %s, want %s: %s", c.Name, c.Status, tc.want, c.Reason)
				}
			}
			c, _ := rep.Check("replay")
			if ev := strings.Join(c.Evidence, "\n"); !strings.Contains(ev, tc.says) {
				t.Errorf("replay's evidence does not say %q:\n%s", tc.says, ev)
			}
			if t.Failed() {
				t.Log("\n" + dump(rep))
			}
		})
	}
}

// A copy answered 5xx while its key was in progress is settled by its retry
// (one transfer, a pass), and the evidence says it was not the 409 a
// correct server gives.
func TestA5xxToACopyInFlightIsWarnedAbout(t *testing.T) {
	t.Parallel()
	for _, busyIs500 := range []bool{true, false} {
		p, url := startPayments(t, paymentFlaws{busyIs500: busyIs500})
		p.work = 20 * time.Millisecond // the copies surely meet the key in progress
		cfg := paymentsProbe(url)
		cfg.Only = []string{"storm"}
		rep := runProbe(t, cfg)
		c, _ := rep.Check("storm")
		warned := strings.Contains(strings.Join(c.Evidence, "\n"), "answered 5xx, where a correct server answers 409")
		if c.Status != probe.Pass || warned != busyIs500 {
			t.Errorf("busy is 500: %v; storm %s (%s), warned of a 5xx: %v\n%s", busyIs500, c.Status, c.Reason, warned, dump(rep))
		}
	}
}
