package cmd_test

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
	"github.com/rogpeppe/go-internal/testscript"
)

var update = flag.Bool("u", false, "rewrite the golden output in testdata/script/*.txtar")

func TestMain(m *testing.M) {
	// The test binary doubles as the PostgreSQL supervisor and as the
	// bank-sim command that the scripts run.
	postgres.MaybeSupervise()
	os.Exit(testscript.RunMain(m, map[string]func() int{"bank-sim": cmd.Main}))
}

// TestScripts pins the CLI's visible behaviour: output, errors and exit
// status, through the real binary entry point and a real PostgreSQL.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           filepath.Join("..", "testdata", "script"),
		UpdateScripts: *update,
		Setup: func(env *testscript.Env) error {
			// Share the warm cluster cache with the user's own runs
			// instead of an initdb per script in $WORK.
			for _, k := range []string{"BANK_SIM_CACHE_DIR", "BANK_SIM_PG_BINARIES", "DATABASE_URL"} {
				if v := os.Getenv(k); v != "" {
					env.Setenv(k, v)
				}
			}
			if os.Getenv("BANK_SIM_CACHE_DIR") == "" && os.Geteuid() != 0 {
				if dir, err := os.UserCacheDir(); err == nil {
					env.Setenv("BANK_SIM_CACHE_DIR", filepath.Join(dir, "bank-sim"))
				}
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"scrub": scrub,
		},
	})
}

// timeColumn marks a replacement that keeps the text's width, so that a
// diagram's columns still line up in the golden file.
const timeColumn = "\x00time"

var unstable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d+(\.\d+)?(ns|µs|ms|s)\b`), "<dur>"},
	// Real time, rounded for people: a run's "(1.2 s)" and "in 0.8 s", and
	// the time column of a --timeline (the simulated "+31 s" stays).
	{regexp.MustCompile(`\(\d+(\.\d+)? (ms|s|min)\)`), "(<dur>)"},
	{regexp.MustCompile(`(?m)\bin \d+(\.\d+)? (ms|s|min)$`), "in <dur>"},
	{regexp.MustCompile(`(?m)^\d+(\.\d+)? (ms|s) +`), timeColumn},
	{regexp.MustCompile(`(?m)^embedded PostgreSQL .*$|^PostgreSQL at .*$`), "<database>"},
	{regexp.MustCompile(`bank-sim \S+ · seed`), "bank-sim <version> · seed"},
	{regexp.MustCompile(`bank-sim \S+, seed`), "bank-sim <version>, seed"},
}

// scrub SRC DST copies SRC to DST with times, ports and versions replaced by
// placeholders, so the rest can be compared byte for byte.
func scrub(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: scrub SRC DST")
	}
	text := ts.ReadFile(args[0])
	for _, u := range unstable {
		if u.with == timeColumn {
			text = u.re.ReplaceAllStringFunc(text, func(m string) string {
				return "<t>" + strings.Repeat(" ", max(len(m)-3, 1))
			})
			continue
		}
		text = u.re.ReplaceAllString(text, u.with)
	}
	if err := os.WriteFile(ts.MkAbs(args[1]), []byte(text), 0o644); err != nil {
		ts.Fatalf("%v", err)
	}
}
