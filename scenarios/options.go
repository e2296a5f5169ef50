package scenarios

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem/mistakes"
)

// Options change how ExecuteWith runs a scenario.
type Options struct {
	// Bug, when set, is switched on in every handler and client of the
	// protected phases: a protected phase that still passes has missed it.
	// Controls keep their own deliberate mistakes and are run unchanged.
	Bug *mistakes.Bug
	// SkipControls runs only the protected phases (the audit needs no proof
	// that the faults are real on every run).
	SkipControls bool

	// Faults add faults to the story for one run, or override the story's
	// own fault of the same name: a live experiment. They apply to every
	// network (in-process faults) and proxy (connection faults) of every
	// phase.
	Faults []FaultSpec
	// Amount, when above zero, replaces the story's amount (Scenario.Amount).
	Amount int64
	// Snapshots reads the balances after every request a server answers
	// (Event.Ledger), for `bank-sim compare`.
	Snapshots bool
	// Held, when set, is how long the run has been held so far by whoever
	// watches it (a teacher's pauses under --step, --pace's waits): the
	// story's clock (Event.Elapsed, Report.Duration) leaves it out, so that
	// a paused story's times are its run's, as --timeline shows them.
	Held func() time.Duration

	heldAtStart time.Duration // Held when the scenario started
}

// heldSince is how long the run was held since the scenario started.
func (o Options) heldSince() time.Duration {
	if o.Held == nil {
		return 0
	}
	return o.Held() - o.heldAtStart
}

func (o Options) changed() bool { return len(o.Faults) > 0 || o.Amount > 0 }

// changes describes the experiment for the report.
func (o Options) changes(s Scenario, fired map[string]int) []Change {
	var out []Change
	for _, f := range o.Faults {
		n := fired[f.Name]
		out = append(out, Change{What: "--fault " + f.String(), Fired: &n})
	}
	if o.Amount > 0 {
		out = append(out, Change{What: fmt.Sprintf("--amount %s instead of the story's %s", bank.Naira(o.Amount), bank.Naira(s.Amount))})
	}
	return out
}

// FaultSpec is one fault of a live experiment: a registered fault's name and
// the attempts it strikes (every attempt when empty).
type FaultSpec struct {
	Name     string
	Attempts []int
}

// String is the spec as --fault takes it: "lose-response@1,2".
func (f FaultSpec) String() string {
	if len(f.Attempts) == 0 {
		return f.Name
	}
	s := make([]string, len(f.Attempts))
	for i, a := range f.Attempts {
		s[i] = strconv.Itoa(a)
	}
	return f.Name + "@" + strings.Join(s, ",")
}

// ParseFault reads NAME or NAME@N[,N…]: a fault registered in faults
// (in-process, or a connection fault for the stories over HTTP) and the
// attempts it strikes.
func ParseFault(s string) (FaultSpec, error) {
	name, at, hasAt := strings.Cut(strings.TrimSpace(s), "@")
	spec := FaultSpec{Name: name}
	if !slices.Contains(faults.Names(), name) && !slices.Contains(faults.ConnNames(), name) {
		return spec, fmt.Errorf("unknown fault %q; in-process faults: %s; connection faults (stories over HTTP): %s",
			name, strings.Join(faults.Names(), ", "), strings.Join(faults.ConnNames(), ", "))
	}
	if !hasAt {
		return spec, nil
	}
	for _, part := range strings.Split(at, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > 100 {
			return spec, fmt.Errorf("fault %q: %q is not an attempt number (1, 2, …); write NAME@2 or NAME@1,3", s, part)
		}
		spec.Attempts = append(spec.Attempts, n)
	}
	return spec, nil
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
