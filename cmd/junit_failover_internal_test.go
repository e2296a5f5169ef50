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
