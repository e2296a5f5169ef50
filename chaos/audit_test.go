package chaos_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// The audit: every bug of the catalogue is caught by some check, and the
// correct handler by none. By default each mistake meets the checks until
// one catches it (the scenarios, then the chaos run if none did), and the
// correct handler meets them all; the exhaustive run fills the whole
// matrix, as bank-sim audit does.
func TestAuditCatchesEveryBugAndNotTheCleanHandler(t *testing.T) {
	t.Parallel()
	// A bound against a hang, not a speed test: the whole matrix took 255 s
	// alone on a loaded machine, and ran past 6 minutes beside other
	// packages.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	defer oneWholeAudit()()
	start := time.Now()
	cfg := chaos.AuditConfig{Seed: 42}
	if !pgtest.IsExhaustive() {
		// The chaos column's runs short and deterministic (100 intents, as
		// TestEachRuleAloneCatchesItsMistake's), not the audit's 400 free
		// ones: the mistakes that only a chaos run catches (soleCatches, in
		// audit_alone_test.go) are each caught by their one run, breaking
		// their rule alone, and the correct handler's runs (seeds
		// 42 and 43) reach every path, the same every time. The exhaustive
		// run keeps the audit's own length and its free runs.
		cfg.FirstCatch, cfg.Chaos = true, chaos.Config{Intents: 100, Deterministic: true}
	}
	rep, err := chaos.Audit(ctx, pgtest.Banks(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit took %s", time.Since(start))
	if len(rep.Clean.Caught) != len(rep.Columns) {
		t.Errorf("the clean handler met %d checks of %d", len(rep.Clean.Caught), len(rep.Columns))
	}
	for col, caught := range rep.Clean.Caught {
		if caught {
			t.Errorf("the clean handler was caught by %s: %s", col, rep.Clean.Why[col])
		}
	}
	for _, row := range rep.Rows {
		var by []string
		for _, col := range rep.Columns {
			if row.Caught[col] {
				by = append(by, col)
			}
		}
		if len(by) == 0 {
			t.Errorf("bug %s was caught by no check", row.Bug)
		}
		if !pgtest.IsExhaustive() && len(by) > 0 {
			// First catch: the checks before the one that caught it were
			// filled (and missed it), none after it.
			filled := len(row.Caught)
			if len(by) != 1 || filled == 0 || rep.Columns[filled-1] != by[0] {
				t.Errorf("bug %s: caught by %v after %d checks, want the first catch to end its row", row.Bug, by, filled)
			}
		}
		for _, sc := range soleCatches {
			// No scenario catches the mistakes only one rule of the chaos
			// checker catches.
			if row.Bug != sc.bug {
				continue
			}
			if !slices.Equal(by, []string{chaos.ChaosColumn}) {
				t.Errorf("bug %s, which only the %s rule should catch, was caught by %v, want %s alone: %v", row.Bug, sc.rule, by, chaos.ChaosColumn, row.Why)
			}
			// Its chaos run breaks its rule and no other (the free runs of
			// the exhaustive run: at most the backups chaos.AloneNote names):
			// so with that rule off it would go uncaught
			// (TestEachRuleAloneCatchesItsMistake switches it off).
			if !pgtest.IsExhaustive() && !slices.Equal(row.Broken, []string{sc.rule}) {
				t.Errorf("bug %s broke %v, want [%s] alone", row.Bug, row.Broken, sc.rule)
			}
			for _, k := range row.Broken {
				if k != sc.rule && !slices.Contains(sc.backups, k) {
					t.Errorf("bug %s broke %s, neither its rule %s nor a backup %v: %v", row.Bug, k, sc.rule, sc.backups, row.Why)
				}
			}
		}
		if row.Caught[chaos.ChaosColumn] && len(row.Broken) == 0 {
			t.Errorf("bug %s: caught by the chaos run, which names no rule broken", row.Bug)
		}
		t.Logf("%-20s caught by %v (chaos: %v)", row.Bug, by, row.Broken)
	}
	for _, k := range chaos.Kinds() {
		t.Logf("%-26s alone catches %v", k, rep.Alone()[k])
	}
	caught, total := rep.KillRatio()
	if !rep.Passed() {
		t.Errorf("kill ratio %d/%d", caught, total)
	}
}
