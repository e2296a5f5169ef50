package cmd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
)

// balance reads an account through serve's API, as its owner.
func balance(t *testing.T, url, token, id string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/accounts/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var a struct {
		BalanceKobo int64 `json:"balanceKobo"`
	}
	if err := json.NewDecoder(res.Body).Decode(&a); err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /accounts/%s: %d %v", id, res.StatusCode, err)
	}
	return a.BalanceKobo
}

// chaos --target against bank-sim serve, both through the command line:
// --dry-run states the money and moves none; the run is VALID (exit 0),
// checks the money through serve's account endpoint, and leaves the bank's
// total where it was.
func TestChaosTargetAgainstServe(t *testing.T) {
	t.Parallel()
	sv := startServe(t)
	ada, bola := balance(t, sv.url, "token-ada", "1"), balance(t, sv.url, "token-bola", "2")

	r := run(t, context.Background(), mustNotStart(t), "chaos", "--target", sv.url, "--seed", "21", "--intents", "300", "--dry-run")
	if r.code != cmd.ExitOK || !strings.Contains(r.stdout, "dry run: nothing was sent") || !strings.Contains(r.stdout, "from ada to bola and ₦") {
		t.Fatalf("dry run exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if a, b := balance(t, sv.url, "token-ada", "1"), balance(t, sv.url, "token-bola", "2"); a != ada || b != bola {
		t.Fatalf("after --dry-run: Ada %d, Bola %d; before: %d, %d", a, b, ada, bola)
	}

	history := filepath.Join(t.TempDir(), "h.json")
	r = run(t, context.Background(), mustNotStart(t), "chaos", "--target", sv.url, "--seed", "21", "--intents", "300", "--json",
		"--exact-replays", "--balances-url", sv.url+"/accounts/{id}", "--history", history)
	var out struct {
		Verdict string `json:"verdict"`
		Result  struct {
			Unchecked []struct{ Kind string } `json:"unchecked"`
			Stats     struct{ Transfers int } `json:"stats"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("--json: %v\n%s\nstderr:\n%s", err, r.stdout, r.stderr)
	}
	if r.code != cmd.ExitOK || out.Verdict != "VALID" {
		t.Fatalf("chaos --target exit %d, verdict %s; stderr:\n%s", r.code, out.Verdict, r.stderr)
	}
	if out.Result.Stats.Transfers == 0 || len(out.Result.Unchecked) == 0 {
		t.Errorf("a run that made no transfer, or claims to check everything: %+v", out.Result)
	}
	if a, b := balance(t, sv.url, "token-ada", "1"), balance(t, sv.url, "token-bola", "2"); a+b != ada+bola || a == ada {
		t.Errorf("after the run: Ada %d + Bola %d, want the total %d conserved and money moved", a, b, ada+bola)
	}
	// The same seed again: its keys are known to serve (GET
	// /transfers?key=), and their stored answers would pass for this run's.
	r = run(t, context.Background(), mustNotStart(t), "chaos", "--target", sv.url, "--seed", "21", "--intents", "300")
	if r.code != cmd.ExitUsage || !strings.Contains(r.stderr, "already knows the key of intent 0") {
		t.Errorf("a seed used before: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	// Issue 21: the report lists what it cannot check once (the plan's
	// "cannot"), and a target that does not promise byte-for-byte replays
	// is not said to have been replayed byte for byte.
	r = run(t, context.Background(), mustNotStart(t), "chaos", "--target", sv.url, "--seed", "22", "--intents", "60")
	if r.code != cmd.ExitOK && r.code != cmd.ExitInconclusive {
		t.Fatalf("chaos --target, text: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout, "key-lost — "); n != 1 {
		t.Errorf("the rules it cannot check are listed %d times, want once:\n%s", n, r.stdout)
	}
	if !regexp.MustCompile(`(?m)^unchecked +the \d+ listed under “cannot” above$`).MatchString(r.stdout) {
		t.Errorf("the report does not refer to the plan's list:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "byte for byte") {
		t.Errorf("the report claims byte-for-byte replays without --exact-replays:\n%s", r.stdout)
	}

	// The saved history re-checks offline with the same verdict, by the
	// black box's rules (no ledger of labelled transfers to read).
	r = run(t, context.Background(), mustNotStart(t), "check", history)
	if r.code != cmd.ExitOK || !strings.Contains(r.stdout, "VALID seed 21") || !strings.Contains(r.stdout, "no transfer was told to two intents") {
		t.Errorf("check of the target's history: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	sv.stop(t)
}
