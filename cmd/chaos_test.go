package cmd_test

import (
	"context"
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
