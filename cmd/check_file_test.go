package cmd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
)

// Issue 19, defect 3: check on a device (which would be read for ever),
// and on a history too large to be one, fails at once with a message that
// says what it reads, exit 2; and so does scenario --recipe.
func TestCheckRefusesWhatIsNotAHistoryFile(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 300<<20); err != nil { // sparse
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "/dev/zero"}, "bank-sim: /dev/zero is not a regular file (it is a character device); bank-sim reads a history written by 'bank-sim chaos --history FILE'"},
		{[]string{"check", big}, "big.json is larger than 256 MiB; bank-sim reads a history written by 'bank-sim chaos --history FILE', which is never that large"},
		{[]string{"scenario", "--recipe", "/dev/zero"}, "bank-sim: --recipe: /dev/zero is not a regular file (it is a character device); bank-sim reads a recipe"},
		{[]string{"check", "--merge", "/dev/zero"}, "bank-sim: /dev/zero is not a regular file (it is a character device); bank-sim reads a campaign's result file"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		r := run(t, ctx, mustNotStart(t), tc.args...)
		cancel()
		if r.code != cmd.ExitUsage || !strings.Contains(r.stderr, tc.want) || strings.Contains(r.stderr, "goroutine") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%v took %s: it read what it should have refused", tc.args, d)
		}
	}
}

// An interrupted check stops with exit 130 before it judges anything: it
// reads its file only while its context lasts.
func TestAnInterruptedCheckExits130(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "h.json")
	if err := os.WriteFile(path, []byte(`{"seed":1,"opening":[{"id":1}],"final":{"accounts":[{"id":1}]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, context.Background(), mustNotStart(t), "check", path); r.code == cmd.ExitInterrupted || r.code == cmd.ExitUsage {
		t.Fatalf("the control, not interrupted: exit %d, stderr %q", r.code, r.stderr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := run(t, ctx, mustNotStart(t), "check", path)
	if r.code != cmd.ExitInterrupted || !strings.Contains(r.stderr, "bank-sim: interrupted") || r.stdout != "" {
		t.Errorf("check, interrupted: exit %d, stdout %q, stderr %q; want 130 and no verdict", r.code, r.stdout, r.stderr)
	}
}
