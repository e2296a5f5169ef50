package cmd

import (
	"github.com/banksim/bank-sim/chaos"
	"github.com/spf13/cobra"
)

func newCheckCmd(app *App) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a history saved by 'bank-sim chaos --history FILE' again, offline",
		Long: `Check a saved chaos history again, without a database: the checker reads
only the history (every intent, attempt, audit snapshot and the final
ledger), so the verdict is the same as the run's.

Exit code 0 when the history is VALID, 1 on any violation, 4 when it broke
no rule but is INCONCLUSIVE (some defence never exercised, some fault never
fired), 2 when the file cannot be read.`,
		Example: `  bank-sim chaos --seed 42 --history run.json
  bank-sim check run.json`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			h, err := loadHistory(args[0])
			if err != nil {
				return err
			}
			res := chaos.Check(h)
			if asJSON {
				if err := writeJSON(app.Env.Stdout, newChaosJSON(h.Seed, res)); err != nil {
					return err
				}
			} else {
				printChaosResult(app.Env.Stdout, app.palette(), h, res, nil)
			}
			return verdictError(res)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

// checkWritableFlag refuses, before any work, a path that cannot be
// written.
func checkWritableFlag(flag, path string) error { return checkOutputFile(flag, path) }

// loadHistory reads a history saved by chaos --history, and refuses anything
// else (an empty object, a scenario report) instead of checking it as an
// empty run: exit 2, said in the user's terms.
func loadHistory(path string) (*chaos.History, error) {
	h, err := chaos.Load(path)
	if err != nil {
		if bad := jsonFileProblem(path, "a bank-sim history", "save one with 'bank-sim chaos --history FILE'", err); bad != nil {
			return nil, usageError("%v", bad)
		}
		return nil, usageError("cannot read %s (%s)", path, plainIOError(err))
	}
	if len(h.Opening) == 0 || len(h.Final.Accounts) == 0 && h.Config.Target == nil { // a target run without a balance source has no ledger
		return nil, usageError("%s is not a bank-sim history: it has no opening bank and no final ledger; save one with 'bank-sim chaos --history FILE'", path)
	}
	return h, nil
}
