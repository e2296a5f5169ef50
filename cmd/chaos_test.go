package cmd_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
)

// A chaos run's verdict is its exit code: 1 for a broken rule, 4 for a run
// that broke none but never exercised some defence; `check` gives a saved
// history the same one.
func TestChaosVerdictsExitOneOrFour(t *testing.T) {
	t.Parallel()
	history := filepath.Join(t.TempDir(), "short.json")
	short := run(t, context.Background(), postgres.Start, "chaos", "--seed", "1", "--intents", "60", "--clients", "4", "--history", history, "--no-color")
	if short.code != cmd.ExitInconclusive || !strings.Contains(short.stdout, "INCONCLUSIVE") {
		t.Errorf("60 intents: exit %d, want %d (INCONCLUSIVE); stdout:\n%s\nstderr: %s", short.code, cmd.ExitInconclusive, short.stdout, short.stderr)
	}
	if r := run(t, context.Background(), mustNotStart(t), "check", history, "--no-color"); r.code != cmd.ExitInconclusive {
		t.Errorf("check of the short run: exit %d, want %d; stderr: %s", r.code, cmd.ExitInconclusive, r.stderr)
	}
	bug := run(t, context.Background(), postgres.Start, "chaos", "--seed", "1", "--intents", "200", "--bug", "no-fingerprint", "--json")
	if bug.code != cmd.ExitFailed || !strings.Contains(bug.stdout, `"verdict": "INVALID"`) {
		t.Errorf("--bug no-fingerprint: exit %d, want %d with verdict INVALID; stdout:\n%.2000s\nstderr: %s", bug.code, cmd.ExitFailed, bug.stdout, bug.stderr)
	}
}
