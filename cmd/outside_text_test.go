package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
)

// hostileText sets the terminal's title, rings, clears the screen and
// returns to the start of the line to overwrite a failure with a pass.
const hostileText = "boom\x1b]0;X\x07\x1b[2J\rfake: PASS\x7f\u009b\nVALID seed 1"

// controlByte names the first control character in s that is not
// bank-sim's own newline, or "".
func controlByte(s string) string {
	for _, r := range s {
		if r < 0x20 && r != '\n' || r >= 0x7f && r <= 0x9f {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

func assertNoControl(t *testing.T, what string, r result) {
	t.Helper()
	for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
		if c := controlByte(s); c != "" {
			t.Errorf("%s: %s carries the raw control character %s from outside:\n%q", what, name, c, s)
		}
		// A newline from outside would start a line of the target's.
		if regexp.MustCompile(`(?m)^VALID seed 1`).MatchString(s) {
			t.Errorf("%s: %s has a line the outside text began:\n%s", what, name, s)
		}
	}
}

// Issue 29, item 7: a target's answer reaches neither stdout nor stderr
// with its control characters: probe and chaos --target print what the
// target said, escaped, also with colour off and no terminal.
func TestATargetsControlCharactersNeverReachTheTerminal(t *testing.T) {
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
			w.WriteHeader(422) // a key's second request: refused, in the server's words
			answerRaw(w, map[string]string{"code": hostileText})
			return
		}
		// Raw, not JSON's escapes: a hostile server need not write JSON.
		if r.Method == "POST" && strings.Contains(r.URL.Path, "transfers") {
			w.WriteHeader(201) // one transfer, told to every intent
			id, _ := json.Marshal(map[string]string{"transferId": "t-" + hostileText})
			w.Write(id)
			return
		}
		w.WriteHeader(422)
		w.Write([]byte(`{"error":"` + hostileText + `"}`))
	}))
	defer srv.Close()
	for _, args := range [][]string{
		{"probe", srv.URL},
		{"chaos", "--target", srv.URL, "--intents", "4"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		r := run(t, ctx, mustNotStart(t), args...)
		cancel()
		if !strings.Contains(r.stdout+r.stderr, "fake: PASS") {
			t.Errorf("%v: the target's text is not shown at all (exit %d):\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		assertNoControl(t, strings.Join(args[:2], " "), r)
	}
}

// A history file's strings are outside text too: check prints them
// escaped, and its --json stays JSON.
func TestAHistorysControlCharactersNeverReachTheTerminal(t *testing.T) {
	t.Parallel()
	opening := []bank.Account{{ID: 1, OwnerID: 1, Holder: "Ada " + hostileText, Status: "active", BalanceKobo: 1_000}, {ID: 2, OwnerID: 2, Holder: "Bola", Status: "active", BalanceKobo: 1_000}}
	h := chaos.History{
		Seed:    1,
		Opening: opening,
		Intents: []chaos.Intent{{Label: "intent-0 " + hostileText, UserID: 1, Key: "k " + hostileText, Outcome: chaos.SeenRejected,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100},
			Attempts: []chaos.Attempt{{N: 1, Phase: chaos.PhaseFault, Key: "k " + hostileText, StartNs: 1, EndNs: 2, Status: 422,
				Body: chaos.Bytes(`{"error":"` + hostileText + `"}`), Error: hostileText, Seen: chaos.SeenRejected}}}},
		Final: bank.Ledger{Accounts: opening, Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 100, Intent: "intent-0 " + hostileText}}},
		Fired: map[string]int{}, Server: map[string]int{}, Duration: 10,
	}
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "h.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, context.Background(), mustNotStart(t), "check", path)
	if !strings.Contains(r.stdout+r.stderr, "fake: PASS") {
		t.Errorf("check: the history's text is not shown at all (exit %d):\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	assertNoControl(t, "check", r)
	r = run(t, context.Background(), mustNotStart(t), "check", path, "--json")
	assertNoControl(t, "check --json", r)
	if !json.Valid([]byte(r.stdout)) {
		t.Errorf("check --json is not JSON:\n%s", r.stdout)
	}
}
