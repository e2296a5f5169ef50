package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// targetAudit runs the target audit, bounded.
func targetAudit(t *testing.T, cfg chaos.TargetAuditConfig) chaos.TargetAuditReport {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute, errors.New("the target audit did not finish within 3 minutes"))
	defer cancel()
	rep, err := chaos.TargetAudit(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Issue 30: every rule of the target checker earns its place. Each
// reference target's flaw, through a short seeded chaos --target, breaks
// its own rule and no other (so that rule switched off lets it through),
// the correct reference target breaks none, and every rule has a mistake
// it alone catches, or says which rule backs it up.
func TestTargetAuditEveryRuleAloneCatchesAMistake(t *testing.T) {
	t.Parallel()
	rep := targetAudit(t, chaos.TargetAuditConfig{Seed: 1, Intents: 200})
	for _, row := range append([]chaos.TargetAuditRow{rep.Clean}, rep.Rows...) {
		t.Logf("%-26s must break %-22s broke %v", row.Mistake, orNothing(row.Rule), row.Broken)
	}
	if f := rep.Failures(); len(f) > 0 {
		t.Fatalf("the target audit failed:\n%s", strings.Join(f, "\n"))
	}
	alone, backed := rep.Alone(), chaos.TargetBackedUp()
	for _, k := range chaos.TargetKinds() {
		switch {
		case len(alone[k]) > 0 && backed[k] != "":
			t.Errorf("%s alone catches %v, yet is listed as backed up (%s)", k, alone[k], backed[k])
		case len(alone[k]) == 0 && backed[k] == "":
			t.Errorf("no reference mistake needs %s, and nothing says which rule backs it up", k)
		case len(alone[k]) == 0:
			t.Logf("%s: no reference mistake here; %s", k, backed[k])
		}
	}
}

func orNothing(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// Switched off, each rule lets its mistake through, and the audit fails
// naming the rule and the mistake; the full sweep, one audit per rule.
func TestTargetAuditFailsWithAnyRuleOff(t *testing.T) {
	pgtest.Exhaustive(t)
	for _, m := range chaos.TargetMistakes() {
		t.Run(m.Rule, func(t *testing.T) {
			rep := targetAudit(t, chaos.TargetAuditConfig{Seed: 2, Off: []string{m.Rule}})
			want := fmt.Sprintf("%s MISSED: only %s catches it", m.Name, m.Rule)
			if f := rep.Failures(); !slices.ContainsFunc(f, func(s string) bool { return strings.HasPrefix(s, want) }) {
				t.Fatalf("with %s off, the audit's failures are %q, want one starting %q", m.Rule, f, want)
			}
		})
	}
}
