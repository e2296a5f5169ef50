package cmd

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// A failover drill's JUnit report fails what a CI gate must stop on: a
// failover command that did not exit 0, and a change of primary across
// which an acknowledged transfer was lost, each its own test case with
// what happened; the run itself fails on its violations.
func TestFailoverJUnitFailsTheCommandAndTheLossesAcrossTheChange(t *testing.T) {
	t.Parallel()
	lost := chaos.Violation{Kind: chaos.KindAckMissing, Detail: "intent-7 was told transfer 12, which is not in the ledger", Intent: 7}
	h := &chaos.History{Seed: 5, FailoverCommand: &chaos.FailoverCommand{Command: "patronictl failover --force", AfterIntent: 3,
		StartNs: 1e9, EndNs: 3e9, ExitCode: 1, Output: "Error: no candidate\n"}}
	res := chaos.Result{Violations: []chaos.Violation{lost}, PrimaryChanges: []chaos.PrimaryChangeResult{{
		PrimaryChange: chaos.PrimaryChange{Cause: chaos.CauseCommand, From: "h1:5432", To: "h2:5432", LostNs: 2e9, SeenNs: 25e8},
		LastAckNs:     19e8, FirstAckNs: 26e8, Crossing: []chaos.Violation{lost}}}}
	path := filepath.Join(t.TempDir(), "drill.xml")
	if err := writeJUnitSuite(path, failoverJUnit(h, res)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Tests != 3 || doc.Failures != 3 || len(doc.Suites) != 1 {
		t.Fatalf("%d tests, %d failures, want 3 and 3:\n%s", doc.Tests, doc.Failures, data)
	}
	failed := map[string]string{}
	for _, c := range doc.Suites[0].Cases {
		if c.Failure != nil {
			failed[c.Name] = c.Failure.Type + ": " + c.Failure.Body
		}
	}
	for name, want := range map[string]string{
		"chaos run, seed 5":                 "InvariantViolation: acknowledged-missing",
		"failover command":                  "FailoverCommandFailed: Error: no candidate",
		"primary changed h1:5432 → h2:5432": "LostAcrossFailover: acknowledged-missing: intent-7",
	} {
		if !strings.HasPrefix(failed[name], want) {
			t.Errorf("case %q: failure %q, want it to start %q", name, failed[name], want)
		}
	}
}

// The terminal and --json say what the drill did: the command with the
// end of its output, the change with its window and what crossed it.
func TestFailoverDrillInTheTerminalAndJSON(t *testing.T) {
	t.Parallel()
	h := &chaos.History{Seed: 5, FailoverCommand: &chaos.FailoverCommand{Command: "pg_autoctl perform failover", AfterIntent: 3,
		StartNs: 1e9, EndNs: 3e9, ExitCode: 0, Output: "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\n16:02:11 node 2 is now primary\n"},
		PrimaryChanges: []chaos.PrimaryChange{{Cause: chaos.CauseCommand, From: "h1:5432", To: "h2:5432", FromTimeline: 4, ToTimeline: 5,
			LastSeenNs: 15e8, LostNs: 2e9, SeenNs: 25e8}}}
	var term strings.Builder
	(chaosOptions{}).verdict(&Env{}, &term, newPalette(false), h, nil)
	for _, want := range []string{
		`failover-cmd  "pg_autoctl perform failover" as intent 3 started, at 1s, for 2s: exit 0`,
		"| 16:02:11 node 2 is now primary",
		"primary       changed: h1:5432 (timeline 4) → h2:5432 (timeline 5), after the run's --failover-cmd",
	} {
		if !strings.Contains(term.String(), want) {
			t.Errorf("the terminal lacks %q:\n%s", want, term.String())
		}
	}
	if strings.Contains(term.String(), "| line 2") {
		t.Errorf("the terminal shows more than the output's last 5 lines:\n%s", term.String())
	}
	var js strings.Builder
	(chaosOptions{asJSON: true}).verdict(&Env{}, &js, newPalette(false), h, nil)
	for _, want := range []string{`"primaryChanges": [`, `"from": "h1:5432"`, `"failoverCommand": {`, `node 2 is now primary`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("--json lacks %s", want)
		}
	}
}

// A failover command that exits 0 and changes no primary is no drill: the
// terminal says the primary is unchanged, and JUnit fails the command.
func TestAFailoverCommandThatChangedNothingFails(t *testing.T) {
	t.Parallel()
	h := &chaos.History{Seed: 5, FailoverCommand: &chaos.FailoverCommand{Command: "true", AfterIntent: 3, StartNs: 1e9, EndNs: 11e8}}
	var term strings.Builder
	(chaosOptions{}).verdict(&Env{}, &term, newPalette(false), h, nil)
	if !strings.Contains(term.String(), "primary       unchanged: the failover command changed no primary") {
		t.Errorf("the terminal does not say the primary is unchanged:\n%s", term.String())
	}
	suite := failoverJUnit(h, chaos.Check(h))
	for _, c := range suite.Cases {
		if c.Name == "failover command" && (c.Failure == nil || c.Failure.Type != "NoFailover") {
			t.Errorf("the command's case: failure %+v, want NoFailover", c.Failure)
		}
	}
}
