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
					Article string `json:"article,omitempty"`
					Summary string `json:"summary"`
				}
				items := []item{}
				for _, s := range scenarios.List() {
					items = append(items, item{s.Name, s.DisplayTitle(), s.Lesson, s.Article, s.Summary})
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
			group := -1
			for _, s := range list {
				if g := groupOf(s); g != group {
					if group >= 0 {
						fmt.Fprintln(out)
					}
					group = g
					fmt.Fprintln(out, p.bold.Sprint(groupHeads[g]+":"))
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

// The groups of stories, in the order list, explain --all and --all show
// them: the lesson's, the article's (the lesson does not tell them, but they
// are not bank-sim's invention either), and bank-sim's own.
const (
	groupLesson = iota
	groupArticle
	groupOwn
)

var groupHeads = [...]string{
	groupLesson:  "The lesson's stories, in its order",
	groupArticle: "From the article on Redis, Kafka and the outbox, in its order",
	groupOwn:     "bank-sim's own stories",
}

func groupOf(s scenarios.Scenario) int {
	switch {
	case s.FromLesson():
		return groupLesson
	case s.FromArticle():
		return groupArticle
	}
	return groupOwn
}
