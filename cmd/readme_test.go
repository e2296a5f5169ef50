package cmd_test

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/scenarios"
)

// TestReadmeTwoCommandsRunFromAFreshClone reads the commands under the
// README's "The two commands" as a newcomer copies them: the first must be a
// `go run` of a main package in this repository with arguments bank-sim
// accepts, the second the default suite, so neither needs a build step or
// PATH the newcomer has not set up.
func TestReadmeTwoCommandsRunFromAFreshClone(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := readmeSectionCommands(t, string(readme), "## The two commands")
	if len(cmds) != 2 {
		t.Fatalf("README's \"The two commands\" has %d commands in its first sh block, want 2: %q", len(cmds), cmds)
	}

	first := strings.Fields(cmds[0])
	if len(first) < 4 || first[0] != "go" || first[1] != "run" {
		t.Fatalf("README's first command %q is not `go run ./PATH ARGS…`: a fresh clone has no bank-sim on PATH", cmds[0])
	}
	pkg := first[2]
	if !strings.HasPrefix(pkg, "./") {
		t.Fatalf("README's first command runs %q, want a path relative to the repository's root (./…)", pkg)
	}
	dir := filepath.Join("..", filepath.FromSlash(pkg))
	pkgs, err := parser.ParseDir(token.NewFileSet(), dir, nil, parser.PackageClauseOnly)
	if err != nil {
		t.Fatalf("README's first command runs %s: %v", pkg, err)
	}
	if _, ok := pkgs["main"]; !ok {
		t.Fatalf("README's first command runs %s, which holds no package main", pkg)
	}
	// The arguments must be a command line bank-sim accepts: --help parses
	// it in full (command, scenario name, flags) without starting anything.
	args := append(first[3:], "--help")
	if r := run(t, context.Background(), mustNotStart(t), args...); r.code != 0 {
		t.Fatalf("bank-sim %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	// --help does not look the story up: the name must be one bank-sim has.
	if first[3] != "scenario" || len(first) < 5 {
		t.Fatalf("README's first command %q does not run a story", cmds[0])
	}
	if _, ok := scenarios.Get(first[4]); !ok {
		t.Errorf("README's first command runs story %q, which bank-sim does not have", first[4])
	}

	if got := strings.Join(strings.Fields(cmds[1]), " "); got != "go test ./..." {
		t.Errorf("README's second command is %q, want \"go test ./...\"", cmds[1])
	}
}

// readmeSectionCommands returns the commands of the first ```sh block after
// heading, comments and blank lines left out.
func readmeSectionCommands(t *testing.T, readme, heading string) []string {
	t.Helper()
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q section", heading)
	}
	rest := readme[i+len(heading)+2:]
	if next := strings.Index(rest, "\n## "); next >= 0 {
		rest = rest[:next]
	}
	start := strings.Index(rest, "```sh\n")
	if start < 0 {
		t.Fatalf("README's %q section has no ```sh block", heading)
	}
	block := rest[start+len("```sh\n"):]
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	for _, line := range strings.Split(block, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	return cmds
}
