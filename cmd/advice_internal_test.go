package cmd

import (
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// Issue 19, defect 8: an INCONCLUSIVE target run is not told that the
// default faults reach every defence (they cannot make a server show a
// defence it lacks); it is told what each missing line needs, and that a
// path never taken may be a missing defence.
func TestInconclusiveAdviceFitsTheRun(t *testing.T) {
	target := inconclusiveAdvice(&chaos.History{Config: chaos.Config{Target: &chaos.Target{}}})
	own := inconclusiveAdvice(&chaos.History{})
	if strings.Contains(target, "default faults reach every defence") || !strings.Contains(target, "--faults") || !strings.Contains(target, "defence it lacks") {
		t.Errorf("a target run's advice: %q", target)
	}
	if !strings.Contains(own, "--intents") || !strings.Contains(own, "default faults reach every defence") {
		t.Errorf("bank-sim's own run's advice: %q", own)
	}
}
