package cmd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/htmlreport"
)

// markup would run, or break out of an attribute or of the page's style,
// if a report wrote it as it came.
const markup = `<script>alert(1)</script>"><img src=x onerror=alert(2)></style><b>`

// assertEscaped fails unless page shows markup escaped: not one of its
// tags raw, and its text there (so the test cannot pass on a page that
// left the outside text out).
func assertEscaped(t *testing.T, what, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: no report: %v", what, err)
	}
	page := string(data)
	for _, raw := range []string{"<script>alert", "<img src=x", "onerror=alert(2)>", "<b>"} {
		if strings.Contains(page, raw) {
			t.Errorf("%s: the report has outside markup raw: %q", what, raw)
		}
	}
	if n := strings.Count(page, "</style>"); n != 1 {
		t.Errorf("%s: %d </style>, want the page's own one only", what, n)
	}
	// Escaped as HTML (&lt;img) or quoted as JSON (\u003cimg), it shows.
	if !strings.Contains(page, "img src=x onerror=alert(2)") {
		t.Errorf("%s: the report does not show the outside text at all", what)
	}
	if p := htmlreport.PolicyProblems(data); p != nil {
		t.Errorf("%s: %s", what, strings.Join(p, "; "))
	}
}

// Issue 30, kind 7: markup in a target's answers (its error text and its
// transfer ids) is escaped in the reports of probe --html and chaos
// --target --html.
func TestATargetsMarkupIsEscapedInEveryReport(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		key := r.Header.Get("Idempotency-Key")
		again := seen[key]
		seen[key] = true
		mu.Unlock()
		if r.Method == "POST" && again {
			w.WriteHeader(422) // a key's second request: refused, in words of the server's
			answerRaw(w, map[string]string{"code": markup, "error": markup})
			return
		}
		if r.Method == "POST" && strings.Contains(r.URL.Path, "transfers") {
			w.WriteHeader(201) // one transfer, told to every intent
			answerRaw(w, map[string]string{"transferId": "t-" + markup})
			return
		}
		w.WriteHeader(422)
		answerRaw(w, map[string]string{"error": markup})
	}))
	defer srv.Close()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"probe", srv.URL},
		{"chaos", "--target", srv.URL, "--intents", "4"},
	} {
		page := filepath.Join(dir, args[0]+".html")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		r := run(t, ctx, mustNotStart(t), append(args, "--html", page)...)
		cancel()
		if r.code == 0 || r.code == 2 {
			t.Errorf("%v: exit %d, want a failed check\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		assertEscaped(t, strings.Join(args[:2], " "), page)
	}
}

// A history file's strings (an intent's label, a key, an answer's text, a
// holder's name) are escaped in check FILE --html's report.
func TestAHistorysMarkupIsEscapedInItsReport(t *testing.T) {
	t.Parallel()
	opening := []bank.Account{{ID: 1, OwnerID: 1, Holder: "Ada " + markup, Status: "active", BalanceKobo: 1_000}, {ID: 2, OwnerID: 2, Holder: "Bola", Status: "active", BalanceKobo: 1_000}}
	h := chaos.History{
		Seed:    1,
		Opening: opening,
		Intents: []chaos.Intent{{Label: "intent-0 " + markup, UserID: 1, Key: "k " + markup, Outcome: chaos.SeenRejected,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100},
			Attempts: []chaos.Attempt{{N: 1, Phase: chaos.PhaseFault, Key: "k " + markup, StartNs: 1, EndNs: 2, Status: 422,
				Body: chaos.Bytes(`{"error":` + strings.TrimSpace(jsonString(markup)) + `}`), Error: markup, Seen: chaos.SeenRejected}}}},
		Final: bank.Ledger{Accounts: opening, Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 100, Intent: "intent-0 " + markup}}},
		Fired: map[string]int{}, Server: map[string]int{}, Duration: 10,
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, page := filepath.Join(dir, "h.json"), filepath.Join(dir, "check.html")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, context.Background(), mustNotStart(t), "check", path, "--html", page); r.code != 1 {
		t.Errorf("check of a history that moved money for a refused intent: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	assertEscaped(t, "check --html", page)
}

// answerRaw writes v as JSON with its markup as it is (not \u003c), as a
// server need not escape it.
func answerRaw(w http.ResponseWriter, v any) {
	e := json.NewEncoder(w)
	e.SetEscapeHTML(false)
	e.Encode(v)
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
