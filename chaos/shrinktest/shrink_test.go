package shrinktest_test

import (
	"os"
	"testing"

	"github.com/banksim/bank-sim/chaos/shrinktest"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// Every mistake of the catalogue in the handling of a request (none in the
// side effects beyond the database: those are sideeffects' tests; nor
// async-replication, the database's mistake, which costs only across a
// failover that the deterministic engine's one server never has: chaos/ha's
// tests catch it) is caught
// by a deterministic chaos run and shrunk to a recipe that replays as a
// story: shrinktest.ToRecipe says how. Its subtests run two at a time
// (GOMAXPROCS here); in the chaos package it ran alone, because beside the
// audit it starved it.
func TestShrinkHandlerMistakesToARecipe(t *testing.T) {
	shrinktest.Each(t, func(b mistakes.Bug) bool {
		return b.Outbox == (outbox.Flaws{}) && !b.AsyncReplication && !shrinktest.IsPipelineMistake(b.Name)
	})
}
