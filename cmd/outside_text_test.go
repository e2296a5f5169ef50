package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
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
	srv := hostileTarget(t, hostileText, true)
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
	h := hostileHistory(hostileText, `{"error":"`+hostileText+`"}`)
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
