package cmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
)

// A chaos run's verdict is its exit code: 1 for a broken rule, 4 for a run
// that broke none but never exercised some defence; `check` gives a saved
// history the same one. The two runs also carry what chaos.txtar pinned of
// them (one run each for the exit code and the text): sixty intents cannot
// meet every defence, and say what they missed; the mistake the probe found
// outside every check (a claim on the request's context, which a client
// that disconnects leaves in progress) breaks the census before healing.
func TestChaosVerdictsExitOneOrFour(t *testing.T) {
	t.Parallel()
	history := filepath.Join(t.TempDir(), "short.json")
	short := run(t, context.Background(), postgres.Start, "chaos", "--seed", "1", "--intents", "60", "--clients", "4", "--history", history, "--no-color")
	if short.code != cmd.ExitInconclusive || !strings.Contains(short.stdout, "INCONCLUSIVE") {
		t.Errorf("60 intents: exit %d, want %d (INCONCLUSIVE); stdout:\n%s\nstderr: %s", short.code, cmd.ExitInconclusive, short.stdout, short.stderr)
	}
	for _, want := range []string{
		`NOT REACHED \(reached by: `,
		`(?m)^INCONCLUSIVE no rule broken, but this run cannot vouch for what it never exercised:$`,
		`(?m)^   - \S+ never happened \(reached by: `,
	} {
		if !regexp.MustCompile(want).MatchString(short.stdout) {
			t.Errorf("60 intents: stdout lacks %s:\n%s", want, short.stdout)
		}
	}
	if r := run(t, context.Background(), mustNotStart(t), "check", history, "--no-color"); r.code != cmd.ExitInconclusive || !regexp.MustCompile(`(?m)^INCONCLUSIVE `).MatchString(r.stdout) {
		t.Errorf("check of the short run: exit %d, want %d (INCONCLUSIVE); stdout:\n%s\nstderr: %s", r.code, cmd.ExitInconclusive, r.stdout, r.stderr)
	}
	checkWorkerErrors(t, history)
	bug := run(t, context.Background(), postgres.Start, "chaos", "--seed", "1", "--intents", "100", "--bug", "claim-on-request-context", "--no-color")
	if bug.code != cmd.ExitFailed {
		t.Errorf("--bug claim-on-request-context: exit %d, want %d (INVALID); stdout:\n%.2000s\nstderr: %s", bug.code, cmd.ExitFailed, bug.stdout, bug.stderr)
	}
	for _, want := range []string{
		`✗ no key in progress without a live holder before healing: \d+ violation`,
		`(?m)^first violation: key-abandoned key \d+/\S+ was in progress \(lock \S+\) before healing, but its holder had returned`,
		`(?m)^INVALID \d+ violation`,
	} {
		if !regexp.MustCompile(want).MatchString(bug.stdout) {
			t.Errorf("--bug claim-on-request-context: stdout lacks %s:\n%.3000s", want, bug.stdout)
		}
	}
}

// A history whose side effects' workers hit errors no outage of the run
// explains: check says how many and which, in its table and in its list of
// what the run cannot vouch for, and so does its JSON. chaos's
// TestSideEffectWorkersErrorsMakeTheRunInconclusive makes such a history in
// real PostgreSQL (and sees it INCONCLUSIVE); here the short run's history
// is given its errors. The one-line mistake it catches is a report that
// leaves them out.
func checkWorkerErrors(t *testing.T, history string) {
	t.Helper()
	raw, err := os.ReadFile(history)
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	h["workerErrors"] = json.RawMessage(`{"count": 7, "expected": 0, "first": [
		{"message": "claim outbox rows: ERROR: relation \"outbox_attempts\" does not exist (SQLSTATE 42P01)", "count": 5},
		{"message": "renew the claim of outbox row 3: ERROR: relation \"outbox_attempts\" does not exist (SQLSTATE 42P01)", "count": 1}]}`)
	erred := filepath.Join(t.TempDir(), "erred.json")
	if raw, err = json.Marshal(h); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(erred, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, context.Background(), mustNotStart(t), "check", erred, "--no-color")
	if r.code != cmd.ExitInconclusive {
		t.Errorf("check of a history whose workers erred: exit %d, want %d (INCONCLUSIVE); stderr: %s", r.code, cmd.ExitInconclusive, r.stderr)
	}
	for _, want := range []string{
		`(?m)^side effects +the outbox's dispatchers and the consumer hit 7 errors, none of which an outage of the run explains$`,
		`(?m)^ +5 × claim outbox rows: ERROR: relation "outbox_attempts" does not exist \(SQLSTATE 42P01\)$`,
		`(?m)^INCONCLUSIVE no rule broken, but this run cannot vouch for what it never exercised, nor for side effects whose workers hit errors no outage of the run explains:$`,
		`(?m)^   - the side effects' workers hit an error no outage of the run explains \(5×\): claim outbox rows: ERROR: relation "outbox_attempts" does not exist \(SQLSTATE 42P01\)$`,
		`(?m)^   - the side effects' workers hit 1 more error that no outage of the run explains$`,
		`mend what they hit, then run again`,
	} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Errorf("check of a history whose workers erred: stdout lacks %s:\n%s", want, r.stdout)
		}
	}
	r = run(t, context.Background(), mustNotStart(t), "check", erred, "--json")
	var report struct {
		Verdict string   `json:"verdict"`
		Missing []string `json:"missing"`
		Result  struct {
			WorkerErrors struct {
				Count int `json:"count"`
			} `json:"workerErrors"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &report); err != nil {
		t.Fatalf("check --json: %v\n%s", err, r.stdout)
	}
	if report.Verdict != "INCONCLUSIVE" || report.Result.WorkerErrors.Count != 7 || !strings.Contains(strings.Join(report.Missing, "\n"), "42P01") {
		t.Errorf("check --json of a history whose workers erred: verdict %s, %d worker errors, missing %q", report.Verdict, report.Result.WorkerErrors.Count, report.Missing)
	}
}
