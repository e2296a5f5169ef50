package cmd

import (
	"github.com/spf13/cobra"
)

// NewRoot builds a fresh command tree for app; tests build one per run.
func NewRoot(app *App) *cobra.Command {
	root := &cobra.Command{
		Use:   "bank-sim",
		Short: "A bank simulator that shows why money-moving APIs need transactions and idempotency keys",
		Long: `bank-sim replays the failures that make money vanish or move twice — a lost
response, a double tap, a server that crashes mid-request, a key reused for
another amount — against a real PostgreSQL that it starts by itself, first
without protection (the fault must break the bank) and then with transactions
and idempotency keys (every invariant must hold).

After every run it checks: the bank's total stays ₦75,000, no balance is
negative, no intent moves money twice, every client was told the truth, and
every balance matches the transfers.`,
		Example: `  bank-sim scenario lost-response        watch a lost response, with and without a key
  bank-sim scenario --all                run every scenario (CI: exit code 0 when all pass)
  bank-sim scenario --all --json         machine-readable reports
  bank-sim scenario --all --junit r.xml  JUnit XML for CI systems
  bank-sim scenario crash-takeover --step   pause after every step (for teaching)
  bank-sim list                          the scenarios and what each shows`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("bank-sim {{.Version}}\n")
	root.PersistentFlags().BoolVar(&app.noColor, "no-color", false, "never print colour (also: NO_COLOR=1, or output that is not a terminal)")
	root.PersistentFlags().StringVar(&app.databaseURL, "database-url", "", "use this PostgreSQL server instead of starting one (default $DATABASE_URL)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError("%s", flagError(c, err))
	})
	root.AddCommand(newScenarioCmd(app), newListCmd(app), newServeCmd(app), newSendCmd(app), newBenchCmd(app),
		newChaosCmd(app), newCheckCmd(app), newAuditCmd(app), newPruneCmd(app), newProbeCmd(app), newExplainCmd(app), newCompareCmd(app))
	return root
}
