package scenarios

import "github.com/banksim/bank-sim/idem"

// Options change how ExecuteWith runs a scenario.
type Options struct {
	// Bug, when set, is switched on in every handler and client of the
	// protected phases: a protected phase that still passes has missed it.
	// Controls keep their own deliberate mistakes and are run unchanged.
	Bug *idem.Bug
	// SkipControls runs only the protected phases (the audit needs no proof
	// that the faults are real on every run).
	SkipControls bool
}

// Caught reports whether a run with a bug caught it: some protected phase
// failed an expectation or an invariant.
func (rep Report) Caught() bool {
	for _, p := range rep.Phases {
		if !p.Control && !p.Passed {
			return true
		}
	}
	return false
}
