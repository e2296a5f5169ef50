package probe_test

import (
	"strings"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/probe"
)

// onlyCheck probes urls with one check and returns its result.
func onlyCheck(t *testing.T, cfg probe.Config, name string) (probe.Result, *probe.Report) {
	t.Helper()
	cfg.Only = []string{name}
	rep := runProbe(t, cfg)
	res, ok := rep.Check(name)
	if !ok {
		t.Fatalf("check %s was not made:\n%s", name, dump(rep))
	}
	return res, rep
}

// wantFail asserts the check failed for the class's reason.
func wantFail(t *testing.T, res probe.Result, rep *probe.Report, explains string) {
	t.Helper()
	if res.Status != probe.Fail || !strings.Contains(res.Reason, explains) {
		t.Fatalf("%s is %s (%s), want FAIL saying %q\n%s", res.Name, res.Status, res.Reason, explains, dump(rep))
	}
	t.Logf("%s: %s", res.Name, res.Reason)
}

func wantPass(t *testing.T, res probe.Result, rep *probe.Report) {
	t.Helper()
	if res.Status != probe.Pass {
		t.Fatalf("%s is %s against the correct target, want PASS: %s\n%s", res.Name, res.Status, res.Reason, dump(rep))
	}
}

// checkLedger asserts the bank conserved its money and Ada ended where she
// started (the probe's restore).
func checkLedger(t *testing.T, l bank.Ledger) {
	t.Helper()
	if l.Total() != 7_500_000 {
		t.Errorf("total %d after the probe, want 7500000", l.Total())
	}
}

// Bola sends Ada's key with Ada's exact body: a store that finds answers by
// the key text alone (serve --bug unscoped-keys) hands Bola Ada's 201.
func TestCrossUserReplay(t *testing.T) {
	t.Parallel()
	unscoped := mustBug(t, "unscoped-keys")
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{})
		res, rep := onlyCheck(t, lesson(sim.urls...), "cross-user-replay")
		wantPass(t, res, rep)
		checkLedger(t, sim.ledger(t))
	})
	t.Run("unscoped-keys", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{bug: &unscoped})
		res, rep := onlyCheck(t, lesson(sim.urls...), "cross-user-replay")
		wantFail(t, res, rep, "leaks transfer")
		checkLedger(t, sim.ledger(t))
	})
}

func mustBug(t *testing.T, name string) mistakes.Bug {
	t.Helper()
	b, err := mistakes.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A transfer refused for want of money, retried with its key after money
// arrived: a target that stores only its successes pays it.
func TestRefusedThenMoved(t *testing.T) {
	t.Parallel()
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{})
		res, rep := onlyCheck(t, lesson(sim.urls...), "refused-then-moved")
		wantPass(t, res, rep)
		checkLedger(t, sim.ledger(t))
	})
	t.Run("correct-reference", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{})
		res, rep := onlyCheck(t, lesson(ref.url()), "refused-then-moved")
		wantPass(t, res, rep)
	})
	t.Run("stores-only-2xx", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{only2xx: true})
		res, rep := onlyCheck(t, lesson(ref.url()), "refused-then-moved")
		wantFail(t, res, rep, "the refusal (422 insufficient_funds) was not stored as the key's answer")
		if ref.total() != 7_500_000 {
			t.Errorf("total %d, want 7500000", ref.total())
		}
	})
}
