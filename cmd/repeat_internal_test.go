package cmd

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/faults/netns"
	"github.com/spf13/cobra"
)

// chaosConfigOf is the run a chaos command line asks for, as runChaos
// would get it, without running it.
func chaosConfigOf(t *testing.T, args []string) chaos.Config {
	t.Helper()
	var out bytes.Buffer
	app := &App{Env: &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}}
	var cfg chaos.Config
	var cfgErr error
	c := newChaosCmdWith(app, func(c *cobra.Command, app *App, o chaosOptions) error {
		cfg, cfgErr = o.config(app, c)
		return nil
	})
	c.SetArgs(args)
	c.SetOut(&out)
	c.SetErr(&out)
	if err := c.Execute(); err != nil || cfgErr != nil {
		t.Fatalf("chaos %s: %v %v\n%s", strings.Join(args, " "), err, cfgErr, out.String())
	}
	return cfg
}

// The command line a run prints to repeat it (the terminal's "repeat
// with", the HTML report's) asks for the same run: every flag that changes
// it, none left at its default by mistake.
func TestChaosRepeatAsksForTheSameRun(t *testing.T) {
	cases := [][]string{
		{"--seed", "7"},
		{"--seed", "7", "--intents", "200", "--bug", "second-transaction", "--clients", "3", "--accounts", "9", "--servers", "2", "--attempts", "6"},
		{"--seed", "7", "--deterministic", "--intents", "20", "--faults", "lose-response=0.25,crash-after-claim=0.1", "--bug", "no-fingerprint"},
		{"--seed", "7", "--duration", "3s", "--faults", "none"},
		{"--seed", "7", "--http", "--intents", "50"},
		{"--seed", "7", "--kill-postgres", "--intents", "50"},
		{"--seed", "7", "--failover", "--replication", "sync", "--intents", "50"},
	}
	if netns.Available() == nil {
		cases = append(cases, []string{"--seed", "7", "--partition", "--cuts", "2", "--cut-for", "1s", "--cut-at", "intent", "--loss", "5", "--intents", "200"})
	}
	for _, args := range cases {
		want := chaosConfigOf(t, args)
		h := &chaos.History{Seed: want.Seed, Config: want}
		if want.Deterministic {
			h.Deterministic = &chaos.Determinism{}
		}
		line := chaosRepeat(h)
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "bank-sim" || fields[1] != "chaos" {
			t.Fatalf("chaos %s repeats with %q, not a bank-sim chaos command", strings.Join(args, " "), line)
		}
		got := chaosConfigOf(t, fields[2:])
		if !reflect.DeepEqual(got, want) {
			t.Errorf("chaos %s repeats with\n  %s\nwhich asks for\n  %+v\nnot\n  %+v", strings.Join(args, " "), line, got, want)
		}
	}
}
