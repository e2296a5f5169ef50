package cmd

import (
	"context"
	"errors"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/userfile"
	"github.com/spf13/cobra"
)

func newCheckCmd(app *App) *cobra.Command {
	var asJSON, merge bool
	var htmlPath string
	var mo mergeOptions
	c := &cobra.Command{
		Use:   "check FILE | --merge FILE…",
		Short: "Check a history saved by 'bank-sim chaos --history FILE' again, offline; --merge a campaign's shards",
		Long: `Check a saved chaos history again, without a database: the checker reads
only the history (every intent, attempt, audit snapshot and the final
ledger), so the verdict is the same as the run's.

With --merge, combine the result files of a campaign's shards ('bank-sim
chaos --seeds LIST --shard K/N --campaign-out FILE', one per machine) into
the campaign: one table in the order of --seeds, one JUnit report (--junit),
coverage judged over every shard's seeds together, and the first failing
seed's recipe, from its shard's file (--save-recipe saves it; --shrink
shrinks it here when the file has none, which needs PostgreSQL). Every
shard of one campaign must be given once: files of different flags, seeds,
numbers of shards or bank-sim builds are refused, as are files over 64 MiB.

--html FILE writes the history's report (the one 'chaos --html' writes),
or with --merge the campaign's.

Exit code 0 when the history is VALID, 1 on any violation, 4 when it broke
no rule but is INCONCLUSIVE (some defence never exercised, some fault never
fired), 2 when the file cannot be read. A merged campaign exits as the
campaign would have: 1 if a seed broke a rule, else 4 if no seed exercised
some defence, else 0; 2 when the files are not one campaign's shards.`,
		Example: `  bank-sim chaos --seed 42 --history run.json
  bank-sim check run.json
  bank-sim check --merge shard-1.json shard-2.json shard-3.json --junit chaos.xml --save-recipe first-failure.json`,
		Args: func(c *cobra.Command, args []string) error {
			switch {
			case merge && len(args) == 0:
				return usageError("--merge: give the result file of every shard (chaos --seeds … --shard K/N --campaign-out FILE)")
			case !merge && len(args) != 1:
				return usageError("check takes one history file (give --merge to combine a campaign's shards' files); got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if merge {
				mo.asJSON, mo.html = asJSON, htmlPath
				return runMerge(c, app, args, mo)
			}
			for _, name := range []string{"junit", "save-recipe", "shrink"} {
				if c.Flags().Changed(name) {
					return usageError("--%s is for a merged campaign: give --merge and the shards' result files", name)
				}
			}
			if htmlPath != "" {
				if err := checkWritableFlag("--html", htmlPath); err != nil {
					return err
				}
			}
			h, err := loadHistory(c.Context(), args[0])
			if err != nil {
				return err
			}
			res, err := checkUntil(c.Context(), h)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(app.Env.Stdout, newChaosJSON(h.Seed, res)); err != nil {
					return err
				}
			} else {
				printChaosResult(app.Env.Stdout, app.palette(), h, res, nil)
			}
			if htmlPath != "" {
				if err := writeHTML(app.Env, htmlPath, chaosHTML(h, res, nil)); err != nil {
					return err
				}
			}
			return verdictError(res)
		},
	}
	f := c.Flags()
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&merge, "merge", false, "combine the result files of a campaign's shards (chaos --shard K/N --campaign-out FILE) into one campaign")
	f.StringVar(&mo.junit, "junit", "", "with --merge: write the campaign's JUnit XML report to `FILE`, one test case per seed")
	f.StringVar(&mo.recipe, "save-recipe", "", "with --merge: write the first failing seed's recipe as JSON to `FILE`")
	addHTMLFlag(f, &htmlPath)
	f.BoolVar(&mo.shrink, "shrink", false, "with --merge: when the first failing seed's shard saved no recipe, run the seed again and shrink it here (needs PostgreSQL)")
	return c
}

// checkWritableFlag refuses, before any work, a path that cannot be
// written.
func checkWritableFlag(flag, path string) error { return checkOutputFile(flag, path) }

// loadHistory reads a history saved by chaos --history, and refuses anything
// else (an empty object, a scenario report) instead of checking it as an
// empty run: exit 2, said in the user's terms.
func loadHistory(ctx context.Context, path string) (*chaos.History, error) {
	h, err := chaos.LoadContext(ctx, path)
	var bad *userfile.Error
	switch {
	case ctx.Err() != nil:
		return nil, ctx.Err() // interrupted: Run says so
	case errors.As(err, &bad):
		return nil, usageError("%s", bad.Msg)
	case err != nil:
		if bad := jsonFileProblem(path, "a bank-sim history", "save one with 'bank-sim chaos --history FILE'", err); bad != nil {
			return nil, usageError("%v", bad)
		}
		return nil, usageError("cannot read %s (%s)", path, plainIOError(err))
	}
	if len(h.Opening) == 0 || len(h.Final.Accounts) == 0 && h.Config.Target == nil { // a target run without a balance source has no ledger
		if _, err := loadCampaign(path); err == nil {
			return nil, usageError("%s is a campaign's results, not one run's history: combine the shards' files with 'bank-sim check --merge FILE…'", path)
		}
		return nil, usageError("%s is not a bank-sim history: it has no opening bank and no final ledger; save one with 'bank-sim chaos --history FILE'", path)
	}
	return h, nil
}

// checkUntil checks h, or gives up when ctx ends: the checker reads a
// large history for seconds, and an interrupt must not wait for it.
func checkUntil(ctx context.Context, h *chaos.History) (chaos.Result, error) {
	done := make(chan chaos.Result, 1)
	go func() { done <- chaos.Check(h) }()
	select {
	case <-ctx.Done():
		return chaos.Result{}, ctx.Err()
	case res := <-done:
		return res, nil
	}
}
