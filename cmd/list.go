package cmd

import (
	"fmt"
	"strings"

	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func newListCmd(app *App) *cobra.Command {
	var asJSON, bugs bool
	c := &cobra.Command{
		Use:   "list",
		Short: "List the scenarios in the lesson's order (or, with --bugs, the known mistakes)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out := app.Env.Stdout
			if bugs {
				return listBugs(app, asJSON)
			}
			if asJSON {
				type item struct {
					Name    string `json:"name"`
					Title   string `json:"title"`
					Lesson  string `json:"lesson,omitempty"`
					Summary string `json:"summary"`
				}
				items := []item{}
				for _, s := range scenarios.List() {
					items = append(items, item{s.Name, s.DisplayTitle(), s.Lesson, s.Summary})
				}
				return writeJSON(out, items)
			}
			p := app.palette()
			list := scenarios.List()
			nameW := 0
			for _, s := range list {
				nameW = max(nameW, width(s.Name))
			}
			textW := 0
			if app.Env.Width > 0 {
				textW = max(app.Env.Width-nameW-4, 30)
			}
			own := false
			fmt.Fprintln(out, p.bold.Sprint("The lesson's stories, in its order:"))
			for _, s := range list {
				if s.Lesson == "" && !own {
					own = true
					fmt.Fprintln(out, p.bold.Sprint("\nbank-sim's own stories:"))
				}
				lines := wrap(s.Summary, textW)
				fmt.Fprintf(out, "  %s  %s\n", p.ok.Sprint(pad(s.Name, nameW)), lines[0])
				for _, l := range lines[1:] {
					fmt.Fprintf(out, "  %s  %s\n", strings.Repeat(" ", nameW), l)
				}
			}
			fmt.Fprintln(out, p.dim.Sprint("\nRun one with 'bank-sim scenario NAME'; 'bank-sim explain NAME' tells what it shows."))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	c.Flags().BoolVar(&bugs, "bugs", false, "list the lesson's mistakes that --bug NAME switches on, and what each costs")
	return c
}
