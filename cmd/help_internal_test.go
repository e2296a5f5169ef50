package cmd

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// chaos --help shows every flag under a heading that says what it is
// about (workload, faults, cluster, determinism, targets, output), none
// left in a catch-all, and each group fits a screen.
func TestChaosHelpGroupsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	app := &App{Env: &Env{Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}}
	c := newChaosCmd(app)
	c.SetArgs([]string{"--help"})
	c.SetOut(&out)
	if err := c.Execute(); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	_, flags, ok := strings.Cut(help, "\nWorkload flags:\n")
	if !ok {
		t.Fatalf("chaos --help has no \"Workload flags:\" heading:\n%s", help)
	}
	flags = "Workload flags:\n" + flags
	seen := map[string]string{}
	for _, block := range strings.Split(strings.TrimSpace(flags), "\n\n") {
		lines := strings.Split(block, "\n")
		title := strings.TrimSuffix(lines[0], ":")
		if title == "Other flags" {
			t.Errorf("chaos --help files flags under no group:\n%s", block)
		}
		if n := len(lines) - 1; n > 24 {
			t.Errorf("chaos --help's %q has %d flags: more than a screen", title, n)
		}
		for _, l := range lines[1:] {
			for _, w := range strings.Fields(l) {
				if strings.HasPrefix(w, "--") {
					name := strings.TrimPrefix(w, "--")
					if prev, dup := seen[name]; dup {
						t.Errorf("--%s is under %q and %q", name, prev, title)
					}
					seen[name] = title
					break
				}
			}
		}
	}
	for _, want := range []string{"Workload flags", "Fault flags", "Cluster flags", "Determinism and campaign flags", "Target flags (with --target: someone else's transfer API)", "Output flags"} {
		if !strings.Contains(help, "\n"+want+":\n") {
			t.Errorf("chaos --help has no %q heading", want)
		}
	}
	n := 0
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		n++
		if _, ok := seen[f.Name]; !ok {
			t.Errorf("--%s is not in chaos --help's flags", f.Name)
		}
	})
	if n < 50 {
		t.Errorf("chaos has %d flags; the test expected about 52", n)
	}
}
