package chaos

import (
	"context"

	"github.com/banksim/bank-sim/postgres/banks"
)

// testPools keeps the tests' run pools between runs on lent banks, as a
// campaign keeps its own: a run on a pool of its own forked a backend for
// each of its connections. It keeps the pools of the four banks used last:
// about as many runs as the tests make at once.
var testPools = newPoolCache(4)

// RunOnLent is RunOnWith with the run's pool kept for the next run on the
// same bank (dbs: pgtest.Banks).
func RunOnLent(ctx context.Context, dbs banks.Databases, cfg Config, opts Options) (*History, error) {
	opts.pools = testPools
	return RunOnWith(ctx, dbs, cfg, opts)
}

// CloseTestPools closes the kept pools; TestMain calls it before pgtest
// drops the banks.
func CloseTestPools() { testPools.close() }

// Ddmin is ddmin, for the tests.
var Ddmin = ddmin

// ChaosCell is chaosCell, for the tests.
var ChaosCell = chaosCell

// SchedStats is what a deterministic run's scheduler asked PostgreSQL about
// locks, cancelled, and predicted.
type SchedStats = schedStats

// RunCounted is RunOnLent for a deterministic run, with the scheduler's
// model of row locks on or off, saying what the scheduler did.
func RunCounted(ctx context.Context, dbs banks.Databases, cfg Config, lockModel bool) (*History, SchedStats, error) {
	var st schedStats
	h, err := RunOnLent(ctx, dbs, cfg, Options{noLockModel: !lockModel, stats: &st})
	return h, st, err
}

// KeepIntents is keepIntents, for the tests.
var KeepIntents = keepIntents
