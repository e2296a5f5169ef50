package scenarios

import (
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
)

// Open makes accounts the bank the phase's invariants are checked against,
// for a phase that opens its own (a chaos recipe replayed as a story).
func (r *Run) Open(accounts []bank.Account) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.opening = append([]bank.Account(nil), accounts...)
}

// Bug is the mistake switched on in the phase (nil: none), for a phase that
// builds its own handlers.
func (r *Run) Bug() *mistakes.Bug { return r.bug }
