package cmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func newExplainCmd(app *App) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "explain NAME... | --all",
		Short: "Explain a story: what it shows, why it breaks, the defence and its SQL",
		Long: `Explain one or more stories in a few paragraphs of Markdown: what the story
shows, why the bank breaks without protection, which defence fixes it, and
the SQL that carries the defence. explain --all prints the whole handout: the
lesson's stories in the lesson's order, then the article's (Redis, Kafka and
the outbox) in its order, then bank-sim's own, the invariants bank-sim
checks and the known mistakes.

Nothing is run and PostgreSQL is not started; run the story itself with
'bank-sim scenario NAME'.`,
		Example: `  bank-sim explain lost-response
  bank-sim explain --all > handout.md`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return scenarios.Names(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			list, err := pickScenarios(all, args)
			if err != nil {
				return err
			}
			w := &paragraphs{out: app.Env.Stdout, width: min(wrapOr(app.Env.Width, 80), 100)}
			if all {
				handout(w, list)
				return nil
			}
			for i, s := range list {
				if i > 0 {
					w.blank()
				}
				explain(w, s, "#")
			}
			return nil
		},
	}
	c.Flags().BoolVar(&all, "all", false, "the whole handout, every story in the lesson's order")
	return c
}

func wrapOr(w, def int) int {
	if w > 0 {
		return w
	}
	return def
}

// paragraphs writes Markdown with its paragraphs wrapped.
type paragraphs struct {
	out   io.Writer
	width int
}

func (w *paragraphs) para(text string) {
	for _, l := range wrap(text, w.width) {
		fmt.Fprintln(w.out, l)
	}
	w.blank()
}

func (w *paragraphs) line(format string, args ...any) { fmt.Fprintf(w.out, format+"\n", args...) }
func (w *paragraphs) blank()                          { fmt.Fprintln(w.out) }

// explain writes one story's handout, under a heading of level.
func explain(w *paragraphs, s scenarios.Scenario, level string) {
	w.line("%s %s (`%s`)", level, s.DisplayTitle(), s.Name)
	w.blank()
	switch groupOf(s) {
	case groupLesson:
		w.para("*From the lesson: " + s.Lesson + ".*")
	case groupArticle:
		w.para("*From the article " + articleRef + ", " + s.Article + ". The lesson does not tell it.*")
	default:
		w.para("*A story of bank-sim's own: the lesson does not tell it.*")
	}
	e := s.Explain
	if e.Shows == "" {
		w.para(s.Summary + ".")
		w.para("(No explanation has been written for this story yet.)")
	} else {
		w.para("**What it shows.** " + e.Shows)
		w.para("**Why it breaks without protection.** " + e.Breaks)
		w.para("**The defence.** " + e.Defence)
	}
	if e.SQL != "" {
		w.line("**The SQL that carries it.**")
		w.blank()
		w.line("```sql")
		w.line("%s", e.SQL)
		w.line("```")
		w.blank()
	}
	if e.Cost != "" {
		w.para("**What it costs.** " + e.Cost)
	}
	see := fmt.Sprintf("**See it:** `bank-sim scenario %s`, with `--timeline` for the picture", s.Name)
	if hasControl(s) {
		see += fmt.Sprintf(", or `bank-sim compare %s` for both runs side by side", s.Name)
	}
	w.para(see + ".")
}

// articleRef names the article the stories with an Article follow.
const articleRef = "“" + scenarios.ArticleTitle + "” (Manuj Dixit)"

func hasControl(s scenarios.Scenario) bool {
	controls, protected := 0, 0
	for _, p := range s.Phases {
		if p.Control {
			controls++
		} else {
			protected++
		}
	}
	return controls > 0 && protected > 0
}

// handout is explain --all: every story, the invariants and the mistakes.
func handout(w *paragraphs, list []scenarios.Scenario) {
	w.line("# Idempotency and safe retries: a bank-sim handout")
	w.blank()
	w.para("bank-sim replays the failures that make money vanish or move twice on a real PostgreSQL: " +
		"a ₦10,000 transfer from Ada to Bola in a bank that opens with Ada ₦50,000, Bola ₦5,000 and " +
		"Chidi ₦20,000 (frozen). Every story runs twice: first without protection, where the fault must " +
		"break the bank (a fault that breaks nothing proves nothing), then with protection, where every " +
		"invariant must hold. Run any of them with `bank-sim scenario NAME`.")
	group := -1
	for _, s := range list {
		if g := groupOf(s); g != group {
			group = g
			w.line("## %s", groupHeads[g])
			w.blank()
			switch g {
			case groupArticle:
				w.para("The article " + articleRef + " carries the lesson's keys into a system of several " +
					"parts: a lock outside the database, a message log, an outbox and its dispatchers, " +
					"consumers. Each story is one of its failures, on the same bank.")
			case groupOwn:
				w.para("Failures the lesson's code would meet in production, which the lesson does not tell.")
			}
		}
		explain(w, s, "###")
	}
	w.line("## What bank-sim checks after every run")
	w.blank()
	for _, inv := range []struct{ name, why string }{
		{bank.InvTotal, "a transfer moves money, it never makes or destroys it: the bank's total stays ₦75,000."},
		{bank.InvNegative, "no balance is below zero (the schema's CHECK is the last line of defence)."},
		{bank.InvOnce, "one user intent moves money at most once, however often it was sent."},
		{bank.InvTruth, "a client told a transfer succeeded finds it in the ledger once, with the amount it asked for; one told it was refused finds nothing."},
		{bank.InvLedger, "every balance equals its opening balance plus the credits minus the debits in the transfers table."},
	} {
		w.para("- **" + inv.name + "**: " + inv.why)
	}
	w.line("## The known mistakes")
	w.blank()
	w.para("Each can be switched on with `bank-sim scenario --all --bug NAME` and `bank-sim chaos --bug NAME`, one of which must then fail; `bank-sim audit` shows which check catches each, and the mistakes only one rule of the chaos checker catches.")
	for _, b := range mistakes.All() {
		w.para("- **" + b.Name + "**: " + strings.TrimSuffix(b.Mistake, ".") + ". " + strings.TrimSuffix(b.Consequence, ".") + ".")
	}
}
