package cmd

import (
	"fmt"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/chaos/ha"
	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/postgres"
	"github.com/spf13/cobra"
)

// runChaosFailover is chaos --failover: the run on a primary and a
// streaming standby of its own (not app.Server's), failed over at the
// seeded intent, and judged like any run.
func runChaosFailover(c *cobra.Command, app *App, o chaosOptions, cfg chaos.Config) error {
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	bar := newProgress(app, "intents settled", "bank-sim chaos:", o.asJSON)
	started := func(pair *postgres.Pair) {
		if !o.asJSON {
			bar.clear()
			printWrapped(out, pair.Describe(), app.Env.Width, p.dim)
			fmt.Fprintf(out, "%s\n", describeConfig(cfg))
		}
	}
	po := ha.PairOptions{Progress: bar.update, Started: started}
	if cfg.Partition != nil {
		cacheDir, err := postgres.CacheDir(app.Env.Getenv("BANK_SIM_CACHE_DIR"))
		if err != nil {
			return &ExitError{Code: ExitFailed, Err: fmt.Errorf("--partition records its namespaces in the cache directory: %v", err)}
		}
		po.NetnsDir = netns.StateDir(cacheDir)
	}
	r, err := ha.RunPair(ctx, cfg, po)
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return runFailed(fmt.Errorf("chaos run through a failover (seed %d): %w", cfg.Seed, err))
	}
	return o.verdict(app.Env, out, p, r.History, nil)
}
