package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// misuser is a transfer API in the lesson's spelling, keys in a map, that
// refuses a key reused for another request its own way (status and body),
// as the idempotency libraries of issue 27 do, and never marks a replay
// with a header. shared: keys are shared by all users, so one user's key
// refuses another's own transfer.
type misuser struct {
	status int
	body   string
	shared bool
	// failEvery, when set, fails every failEvery-th new request (a fresh
	// key) with failure, storing nothing: a transient server error.
	failEvery int
	failure   string
	fresh     int

	mu       sync.Mutex
	balances map[string]int64
	keys     map[string]answer
	next     int
}

type answer struct {
	fp     string
	status int
	body   string
}

var misuserTokens = map[string]string{"token-ada": "1", "token-bola": "2", "token-chidi": "3"}

func startMisuser(t *testing.T, status int, body string, shared bool) string {
	t.Helper()
	m := &misuser{status: status, body: body, shared: shared, balances: map[string]int64{"1": 5_000_000, "2": 500_000, "3": 0}, keys: map[string]answer{}}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return srv.URL
}

func (m *misuser) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	acc, ok := misuserTokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	reply := func(status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	switch {
	case !ok:
		reply(401, `{"error":"unauthenticated"}`)
		return
	case r.Method == "GET" && r.URL.Path == "/accounts/"+acc:
		m.mu.Lock()
		defer m.mu.Unlock()
		reply(200, fmt.Sprintf(`{"balanceKobo":%d}`, m.balances[acc]))
		return
	case r.Method != "POST" || r.URL.Path != "/transfers":
		reply(404, `{"error":"not_found"}`)
		return
	}
	var req struct {
		From, To   json.Number
		AmountKobo int64
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.AmountKobo <= 0 {
		reply(400, `{"error":"bad_request"}`)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		reply(400, `{"error":"idempotency_key_required"}`)
		return
	}
	if req.From.String() != acc {
		reply(404, `{"error":"account_not_found"}`)
		return
	}
	if !m.shared {
		key = acc + "|" + key
	}
	fp := fmt.Sprintf("%s>%s:%d", req.From, req.To, req.AmountKobo)
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, seen := m.keys[key]; seen {
		if a.fp != fp {
			reply(m.status, m.body)
			return
		}
		reply(a.status, a.body)
		return
	}
	if m.fresh++; m.failEvery > 0 && m.fresh%m.failEvery == 0 {
		reply(500, m.failure)
		return
	}
	a := answer{fp: fp, status: 422, body: `{"error":"insufficient_funds"}`}
	switch {
	case req.To.String() == "3":
		a.body = `{"error":"recipient_closed"}`
	case req.To.String() == acc:
		a.body = `{"error":"same_account"}`
	case m.balances[acc] >= req.AmountKobo:
		m.balances[acc] -= req.AmountKobo
		m.balances[req.To.String()] += req.AmountKobo
		m.next++
		a.status, a.body = 201, fmt.Sprintf(`{"transferId":%d,"balanceKobo":%d}`, m.next, m.balances[acc])
	}
	m.keys[key] = a
	reply(a.status, a.body)
}

// judged is what probe and chaos --target said of one target.
type judged struct {
	probe map[string]struct{ Status, Reason string }
	chaos struct {
		Verdict string
		Missing []string
		Result  struct {
			ByKind     map[string]int
			Stats      struct{ Replays int }
			Violations []struct{ Kind, Detail string }
			Coverage   struct {
				Paths []struct {
					Path  string
					Count int
				}
			}
			Unchecked []struct{ Kind, Why string }
		}
	}
}

func (j judged) path(name string) int {
	for _, p := range j.chaos.Result.Coverage.Paths {
		if p.Path == name {
			return p.Count
		}
	}
	return -1
}

func (j judged) missing() string { return strings.Join(j.chaos.Missing, "\n") }

// judge runs probe (the key checks) and chaos --target against a new
// misuser, with the flags given to both.
func judge(t *testing.T, status int, body string, shared bool, flags ...string) judged {
	t.Helper()
	url := startMisuser(t, status, body, shared)
	var j judged
	args := append([]string{"probe", url, "--lookup", "none", "--json", "--seed", "5", "--only", "replay,key-reused-amount,key-reused-recipient,other-user-same-key"}, flags...)
	r := run(t, context.Background(), mustNotStart(t), args...)
	var rep struct {
		Checks []struct{ Name, Status, Reason string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Checks) == 0 {
		t.Fatalf("probe exit %d: %v\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	j.probe = map[string]struct{ Status, Reason string }{}
	for _, c := range rep.Checks {
		j.probe[c.Name] = struct{ Status, Reason string }{c.Status, c.Reason}
	}
	args = append([]string{"chaos", "--target", url, "--lookup", "none", "--json", "--seed", "5", "--intents", "200", "--clients", "4",
		"--balances-url", url + "/accounts/{id}", "--token", "chidi=token-chidi"}, flags...)
	r = run(t, context.Background(), mustNotStart(t), args...)
	if err := json.Unmarshal([]byte(r.stdout), &j.chaos); err != nil || j.chaos.Verdict == "" {
		t.Fatalf("chaos --target exit %d: %v\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	return j
}

// A target that refuses a reused key its own way is judged alike by probe
// and chaos --target: with --key-refusal naming the way, as refusals of the
// key (reached, and no contract violated); without it, the reuse is still
// reached (refused), but neither calls it a violation nor a pass, and both
// name the answer and the flag.
func TestProbeAndChaosJudgeATargetsOwnKeyRefusalAlike(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		status     int
		rule       string
	}{
		{"417", `{"message":"Expectation Failed"}`, 417, "417"},
		{"422 with its own code", `{"error":{"code":"IDEMPOTENCY_FINGERPRINT_MISMATCH","message":"the request differs"}}`, 422, "422:IDEMPOTENCY_FINGERPRINT_MISMATCH"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mapped := judge(t, tc.status, tc.body, false, "--key-refusal", tc.rule)
			for _, name := range []string{"key-reused-amount", "key-reused-recipient"} {
				if c := mapped.probe[name]; c.Status != "PASS" {
					t.Errorf("with --key-refusal %s, probe's %s: %s %s, want PASS", tc.rule, name, c.Status, c.Reason)
				}
				if n := mapped.path(name); n <= 0 {
					t.Errorf("with --key-refusal %s, chaos counted %s %d times, want reached", tc.rule, name, n)
				}
			}
			if n := mapped.chaos.Result.ByKind["wrong-answer"]; n != 0 || mapped.chaos.Verdict == "INVALID" {
				t.Errorf("with --key-refusal %s, chaos: %s, %d wrong answers: %+v", tc.rule, mapped.chaos.Verdict, n, mapped.chaos.Result.Violations)
			}

			bare := judge(t, tc.status, tc.body, false)
			flag := "--key-refusal " + tc.rule
			for _, name := range []string{"key-reused-amount", "key-reused-recipient"} {
				if c := bare.probe[name]; c.Status != "UNKNOWN" || !strings.Contains(c.Reason, flag) {
					t.Errorf("without the flag, probe's %s: %s %q, want UNKNOWN naming %s", name, c.Status, c.Reason, flag)
				}
				if n := bare.path(name); n <= 0 {
					t.Errorf("without the flag, chaos counted %s %d times: a refused reuse is the path reached", name, n)
				}
			}
			if bare.chaos.Verdict != "INCONCLUSIVE" || len(bare.chaos.Result.Violations) != 0 {
				t.Errorf("without the flag, chaos: %s, want INCONCLUSIVE with no violation: %+v", bare.chaos.Verdict, bare.chaos.Result.Violations)
			}
			if m := bare.missing(); !strings.Contains(m, flag) {
				t.Errorf("without the flag, chaos does not name %s among what it cannot vouch for:\n%s", flag, m)
			}
		})
	}
}

// Keys shared by all users: a user's own transfer refused because another
// user sent the same key text is a violation in chaos --target, as it is a
// FAIL in probe, and is never counted as the shared-key path reached.
func TestChaosTargetFailsAUsersTransferRefusedForAnothersKey(t *testing.T) {
	t.Parallel()
	j := judge(t, 422, `{"error":{"code":"IDEMPOTENCY_FINGERPRINT_MISMATCH"}}`, true, "--key-refusal", "422:IDEMPOTENCY_FINGERPRINT_MISMATCH")
	if c := j.probe["other-user-same-key"]; c.Status != "FAIL" || !strings.Contains(c.Reason, "refused as a reused key") {
		t.Errorf("probe's other-user-same-key: %s %q", c.Status, c.Reason)
	}
	found := false
	for _, v := range j.chaos.Result.Violations {
		found = found || v.Kind == "wrong-answer" && strings.Contains(v.Detail, "another user, sent the same key text")
	}
	if j.chaos.Verdict != "INVALID" || !found {
		t.Errorf("chaos --target: %s, violations %+v; want a wrong answer naming the other user's key", j.chaos.Verdict, j.chaos.Result.Violations)
	}
	if n := j.path("shared-key"); n != 0 {
		t.Errorf("shared-key counted %d times though each user's transfer was refused", n)
	}
}

// A target that never marks a replay with a header: its replays are
// recognised by their transfer ids (the same transfer again for the same
// key, also after an answer the proxy dropped), so the replay paths are
// reached and the run is VALID, not INCONCLUSIVE for "replay never
// happened".
func TestChaosTargetRecognisesReplaysWithoutAHeader(t *testing.T) {
	t.Parallel()
	j := judge(t, 422, `{"error":"idempotency_key_reused"}`, false)
	for _, p := range []string{"replay", "replay-after-final", "key-reused-amount", "key-reused-recipient", "shared-key"} {
		if n := j.path(p); n <= 0 {
			t.Errorf("path %s counted %d times, want reached", p, n)
		}
	}
	if j.chaos.Verdict != "VALID" || j.chaos.Result.Stats.Replays == 0 {
		t.Errorf("chaos --target: %s, %d replays; missing %v, violations %+v", j.chaos.Verdict, j.chaos.Result.Stats.Replays, j.chaos.Missing, j.chaos.Result.Violations)
	}
	if c := j.probe["replay"]; c.Status != "PASS" {
		t.Errorf("probe's replay: %s %s", c.Status, c.Reason)
	}
}

// A target that fails with a transient error: chaos --target's summary
// says why, grouped by status and the body's message ("N × 500 deadlock
// detected"), in the terminal, the JSON and the HTML report, the message's
// control characters escaped.
func TestChaosTargetSummaryGroupsCauses(t *testing.T) {
	t.Parallel()
	const want = `500 deadlock detected\x1b[2J`
	start := func() string {
		m := &misuser{status: 422, body: `{"error":"idempotency_key_reused"}`, failEvery: 4, failure: `{"message":"deadlock detected\u001b[2J"}`,
			balances: map[string]int64{"1": 5_000_000, "2": 500_000, "3": 0}, keys: map[string]answer{}}
		srv := httptest.NewServer(m)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	html := filepath.Join(t.TempDir(), "r.html")
	r := run(t, context.Background(), mustNotStart(t), "chaos", "--target", start(), "--lookup", "none", "--json", "--seed", "3", "--intents", "100", "--html", html)
	var out struct {
		Result struct {
			Stats struct {
				ServerErrors int
				Causes       []struct {
					Count int
					Cause string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("chaos --json: %v\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	n := 0
	for _, c := range out.Result.Stats.Causes {
		if c.Cause == want {
			n = c.Count
		}
	}
	if n == 0 || n != out.Result.Stats.ServerErrors {
		t.Errorf("causes %+v, want %q counted once per 5xx (%d)", out.Result.Stats.Causes, want, out.Result.Stats.ServerErrors)
	}
	page, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(page), fmt.Sprint(n)) || !strings.Contains(string(page), "500 deadlock detected") || strings.Contains(string(page), "\x1b") {
		t.Errorf("the HTML report does not list the cause (%v)", err)
	}
	r = run(t, context.Background(), mustNotStart(t), "chaos", "--target", start(), "--lookup", "none", "--seed", "3", "--intents", "100", "--no-color")
	fivexx := regexp.MustCompile(`(\d+) × 5xx`).FindStringSubmatch(r.stdout)
	cause := regexp.MustCompile(`causes +(\d+) × +` + regexp.QuoteMeta(want) + "\n").FindStringSubmatch(r.stdout)
	if fivexx == nil || cause == nil || fivexx[1] != cause[1] || fivexx[1] == "0" || strings.Contains(r.stdout, "\x1b[2J") {
		t.Errorf("the terminal summary does not say N × %s once per 5xx (or prints the escape raw):\n%s", want, r.stdout)
	}
}

// Every report of probe and chaos --target says what it could not check on
// this target and the flag that would check it: a restart, the database's
// failures, and, with one URL, a second copy.
func TestReportsSayWhatTheyCouldNotCheck(t *testing.T) {
	t.Parallel()
	want := map[string]string{"keys lost at a restart": "--restart", "database failures": "--db-proxy", "a second copy": "a second"}
	for _, copies := range []int{1, 2} {
		url := startMisuser(t, 422, `{"error":"idempotency_key_reused"}`, false)
		urls := []string{url}
		if copies == 2 {
			urls = append(urls, strings.Replace(url, "127.0.0.1", "localhost", 1)) // the same server by another name: its keys are shared
		}
		html := filepath.Join(t.TempDir(), "probe.html")
		r := run(t, context.Background(), mustNotStart(t), append(append([]string{"probe"}, urls...), "--lookup", "none", "--seed", "2", "--only", "replay", "--json", "--html", html)...)
		var rep struct {
			Verdict   string
			Unchecked []struct{ What, Flag, Why string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("probe --json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		page, _ := os.ReadFile(html)
		got := map[string]string{}
		for _, u := range rep.Unchecked {
			got[u.What] = u.Flag
			if !strings.Contains(string(page), "not checked: "+u.What) {
				t.Errorf("the probe's HTML report does not list %q as not checked", u.What)
			}
			if !strings.Contains(rep.Verdict, u.What+" ("+u.Flag+")") {
				t.Errorf("the probe's verdict %q does not say %s went unchecked", rep.Verdict, u.What)
			}
		}
		terminal := run(t, context.Background(), mustNotStart(t), append(append([]string{"probe"}, urls...), "--lookup", "none", "--seed", "3", "--only", "replay", "--no-color")...)
		args := []string{"chaos", "--lookup", "none", "--seed", "2", "--intents", "40", "--json"}
		for _, u := range urls {
			args = append(args, "--target", u)
		}
		r = run(t, context.Background(), mustNotStart(t), args...)
		var out struct {
			Result struct{ Unchecked []struct{ Kind, Why string } }
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("chaos --json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		chaosSays := map[string]string{}
		for _, u := range out.Result.Unchecked {
			chaosSays[u.Kind] = u.Why
		}
		for what, flag := range want {
			listed := copies == 1 || what != "a second copy"
			if _, ok := got[what]; ok != listed || ok && !strings.HasPrefix(got[what], flag) {
				t.Errorf("%d URL(s): probe lists %q: %v (flag %q), want %v with %s", copies, what, ok, got[what], listed, flag)
			}
			if ok := strings.Contains(terminal.stdout, what+" ("+flag); ok != listed {
				t.Errorf("%d URL(s): probe's terminal report lists %q with %s: %v, want %v:\n%s", copies, what, flag, ok, listed, terminal.stdout)
			}
			why, ok := chaosSays[what]
			if ok != listed || ok && !strings.Contains(why, "to check it: "+flag) {
				t.Errorf("%d URL(s): chaos --target lists %q: %v (%q), want %v with %s", copies, what, ok, why, listed, flag)
			}
		}
	}
}
