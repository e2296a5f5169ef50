package cmd

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func newListCmd(app *App) *cobra.Command {
	var asJSON, bugs bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List the scenarios, one line each (or, with --bugs, the known mistakes)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out := app.Env.Stdout
			if bugs {
				return listBugs(app, asJSON)
			}
			if asJSON {
				type item struct {
					Name    string `json:"name"`
					Summary string `json:"summary"`
				}
				var items []item
				for _, s := range scenarios.List() {
					items = append(items, item{s.Name, s.Summary})
				}
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(items)
			}
			p := app.palette()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			for _, s := range scenarios.List() {
				fmt.Fprintf(tw, "%s\t%s\n", p.bold.Sprint(s.Name), s.Summary)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	c.Flags().BoolVar(&bugs, "bugs", false, "list the lesson's mistakes that --bug NAME switches on, and what each costs")
	return c
}
