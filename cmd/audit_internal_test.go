package cmd

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// The audit never fails the correct handler for a path its chaos runs did
// not reach: every bug caught and no false alarm is exit 0 when its runs
// together reached every defence, 4 (INCONCLUSIVE, naming the path and the
// runs' seeds) when they did not; a false alarm or a missed bug is 1.
func TestAuditDoesNotFailTheCorrectHandlerForAnUnreachedPath(t *testing.T) {
	t.Parallel()
	report := func(cleanCaught, bugCaught bool, missing ...string) chaos.AuditReport {
		return chaos.AuditReport{Seed: 7, Columns: []string{chaos.ChaosColumn},
			Clean: chaos.AuditRow{Bug: chaos.CleanRow, Caught: map[string]bool{chaos.ChaosColumn: cleanCaught}, Why: map[string]string{},
				Missing: missing, Seeds: []chaos.Seed{7, 8, 9, 10}},
			Rows: []chaos.AuditRow{{Bug: "no-fencing", Caught: map[string]bool{chaos.ChaosColumn: bugCaught}, Why: map[string]string{chaos.ChaosColumn: "fencing broke"}}}}
	}
	exit := func(err error) int {
		var ee *ExitError
		if errors.As(err, &ee) {
			return ee.Code
		}
		return ExitOK
	}
	if code := exit(auditExit(report(false, true))); code != ExitOK {
		t.Errorf("every bug caught, the correct handler's runs reached everything: exit %d, want %d", code, ExitOK)
	}
	rep := report(false, true, "wait-then-replay never happened (reached by: duplicate on the waiting copy (--servers 2 or more))")
	if code := exit(auditExit(rep)); code != ExitInconclusive {
		t.Errorf("the correct handler's runs never reached wait-then-replay: exit %d, want %d", code, ExitInconclusive)
	}
	var out bytes.Buffer
	printAudit(&out, newPalette(false), rep)
	for _, want := range []string{
		"INCONCLUSIVE chaos column: the correct handler broke no rule, but its chaos runs (seeds 7, 8, 9, 10) together never exercised:\n   - wait-then-replay never happened",
		"kill ratio 1/1: INCONCLUSIVE: every bug caught, the correct handler by none, but its chaos column cannot vouch",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "FALSE ALARM") || strings.Contains(out.String(), "FAILED") {
		t.Errorf("an unreached path is neither a false alarm nor a failure:\n%s", out.String())
	}
	if code := exit(auditExit(report(true, true, "wait-then-replay never happened"))); code != ExitFailed {
		t.Errorf("the correct handler caught: exit %d, want %d", code, ExitFailed)
	}
	if code := exit(auditExit(report(false, false))); code != ExitFailed {
		t.Errorf("a bug missed: exit %d, want %d", code, ExitFailed)
	}
}

// The audit's report lists each rule of the chaos checker with the
// mistakes it alone catches, says of a rule with none that no built-in
// mistake needs it (or, for a rule another implies, which backs it up), and
// names the rule switched off that alone caught a mistake now missed.
func TestAuditListsWhatEachRuleAloneCatches(t *testing.T) {
	t.Parallel()
	rep := chaos.AuditReport{Seed: 7, Columns: []string{"rules", chaos.ChaosColumn}, Off: []string{chaos.KindReplay},
		Clean: chaos.AuditRow{Bug: chaos.CleanRow, Caught: map[string]bool{}, Why: map[string]string{}},
		Rows: []chaos.AuditRow{
			{Bug: "keys-lost", Caught: map[string]bool{"rules": false, chaos.ChaosColumn: true}, Why: map[string]string{}, Broken: []string{chaos.KindKeyLost}},
			{Bug: "two-rules", Caught: map[string]bool{"rules": false, chaos.ChaosColumn: true}, Why: map[string]string{}, Broken: []string{chaos.KindTotal, chaos.KindLedger}},
			{Bug: "a-story-too", Caught: map[string]bool{"rules": true, chaos.ChaosColumn: true}, Why: map[string]string{}, Broken: []string{chaos.KindTotal}},
			{Bug: "replays-rebuilt", Caught: map[string]bool{"rules": false, chaos.ChaosColumn: false}, Why: map[string]string{}, Silenced: []string{chaos.KindReplay}},
		}}
	var out bytes.Buffer
	printAudit(&out, newPalette(false), rep)
	for _, want := range []string{
		"   " + chaos.KindKeyLost + " keys-lost\n",
		"   " + chaos.KindAbandoned + " none: no built-in mistake needs this rule\n",
		"   " + chaos.KindOutboxLeft + " none: give-up-on-same-error (a row given up at its second failed send",
		"   " + chaos.KindNegative + " none: alone only where the accounts table leaves the floor to the application",
		"   " + chaos.KindTotal + " none: implied at the end by " + chaos.KindLedger,
		"replays-rebuilt MISSED: only the rule switched off caught it (" + chaos.KindReplay + ")\n",
		"kill ratio 3/4: FAILED",
		"   " + chaos.KindReplay + " switched off (--off): the mistakes it alone caught are MISSED above\n",
	} {
		if !strings.Contains(strings.Join(strings.Fields(out.String()), " ")+"\n", strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}

// audit --target --off: the text report says a switched-off rule is off;
// of one that another backs up, also that no flaw needs it alone and which
// rule backs it up; and a flaw only the switched-off rule caught is MISSED,
// failing the audit. (audit_target.txtar runs such an audit once, as
// --json; this pins its text without another run.)
func TestTargetAuditSaysWhatASwitchedOffRuleCost(t *testing.T) {
	t.Parallel()
	backed := chaos.TargetBackedUp()[chaos.KindTwice]
	if backed == "" {
		t.Fatalf("no rule backs up %s", chaos.KindTwice)
	}
	report := func(off ...string) string {
		rep := chaos.TargetAuditReport{Seed: 1, Off: off, Clean: chaos.TargetAuditRow{Mistake: chaos.CleanRow}}
		for _, m := range chaos.TargetMistakes() {
			row := chaos.TargetAuditRow{Mistake: m.Name, Rule: m.Rule, Broken: []string{m.Rule}}
			if slices.Contains(off, m.Rule) {
				row.Broken = nil
			}
			rep.Rows = append(rep.Rows, row)
		}
		var out bytes.Buffer
		printTargetAudit(&out, newPalette(false), rep)
		return out.String()
	}
	var replayFlaw string
	for _, m := range chaos.TargetMistakes() {
		if m.Rule == chaos.KindReplay {
			replayFlaw = m.Name
		}
	}
	for _, c := range []struct {
		off       []string
		want, not []string
	}{
		{[]string{chaos.KindTwice}, []string{
			chaos.KindTwice + " switched off; no flaw needs it alone: " + backed,
			"target audit passed: each flaw caught by its rule alone, the correct reference target by none (seed 1)",
		}, []string{"FAILED"}},
		{[]string{chaos.KindReplay}, []string{
			chaos.KindReplay + " switched off\n",
			"target audit FAILED: (seed 1)\n   - " + replayFlaw + " MISSED: only " + chaos.KindReplay + " catches it, and it is switched off\n",
		}, []string{"target audit passed", chaos.KindReplay + " switched off;"}},
	} {
		out := report(c.off...)
		squeezed := regexp.MustCompile(` +`).ReplaceAllString(out, " ")
		for _, want := range c.want {
			if !strings.Contains(squeezed, regexp.MustCompile(` +`).ReplaceAllString(want, " ")) {
				t.Errorf("--off %v: the report lacks %q:\n%s", c.off, want, out)
			}
		}
		for _, not := range c.not {
			if strings.Contains(out, not) {
				t.Errorf("--off %v: the report says %q:\n%s", c.off, not, out)
			}
		}
	}
}
