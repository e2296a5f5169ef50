package cmd

import (
	"os"
	"path/filepath"

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
			h, err := chaos.Load(args[0])
			if err != nil {
				return usageError("%v", err)
			}
			res := chaos.Check(h)
			if asJSON {
				if err := writeJSON(app.Env.Stdout, newChaosJSON(h.Seed, res)); err != nil {
					return err
				}
			} else {
				printChaosResult(app.Env.Stdout, app.palette(), h, res)
			}
			return verdictError(res)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return c
}

// checkWritableFlag refuses, before any work, a path that cannot be written.
func checkWritableFlag(flag, path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usageError("%s %s: the directory %s does not exist", flag, path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usageError("%s %s is a directory; give a file name", flag, path)
	}
	return nil
}
