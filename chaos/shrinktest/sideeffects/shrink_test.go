// Package sideeffects_test is shrinktest.ToRecipe run on every mistake of
// the catalogue in the side effects beyond the database, in a test binary,
// and so a go test timeout, of its own (see package shrinktest). It has
// only tests: Go needs no other file for go test or go vet.
package sideeffects_test

import (
	"os"
	"testing"

	"github.com/banksim/bank-sim/chaos/shrinktest"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Every mistake of the catalogue in the side effects (the SMS, the event,
// the external lock, mark-shipped) but the outbox pipeline's own is caught
// by a deterministic chaos run and shrunk to a recipe that replays as a
// story, or, when no chaos run reaches it (its scenario catches it), is
// skipped and says so: shrinktest.ToRecipe says how. Parallel with
// TestShrinkPipelineMistakesToARecipe: the subtests of both share go
// test's parallel slots (GOMAXPROCS, two here), so neither waits for the
// other's last subtest with a slot idle.
func TestShrinkSideEffectMistakesToARecipe(t *testing.T) {
	t.Parallel()
	shrinktest.Each(t, func(b mistakes.Bug) bool {
		return b.Outbox != (outbox.Flaws{}) && !shrinktest.IsPipelineMistake(b.Name)
	})
}

// The same for the mistakes of the outbox's pipeline, which the
// dispatchers and the consumer reach running among the clients with their
// faults: each must be caught (from 60 intents, or 150), and its recipe
// must need its side-effect faults or, with none, its preemptions.
func TestShrinkPipelineMistakesToARecipe(t *testing.T) {
	t.Parallel()
	shrinktest.Each(t, func(b mistakes.Bug) bool {
		return shrinktest.IsPipelineMistake(b.Name)
	})
}
