package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/banksim/bank-sim/chaos"
	"github.com/spf13/cobra"
)

// runTargetAudit is audit --target: the reference targets' flaws through
// chaos --target, in this process, and the rules each alone catches.
func runTargetAudit(c *cobra.Command, app *App, o auditOptions, seed uint64) error {
	for _, r := range o.off {
		if !slices.Contains(chaos.TargetKinds(), r) {
			return usageError("--off %q: no such rule of the target checker; give one of %s", r, strings.Join(chaos.TargetKinds(), ", "))
		}
	}
	if o.html != "" {
		return usageError("--html draws the chaos checker's matrix; audit --target prints its report as text or --json")
	}
	intents := o.intents
	if !c.Flags().Changed("intents") {
		intents = chaos.TargetAuditIntents
	}
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · audit --target · seed %d (repeat this run with --seed %d)\n", version(), seed, seed)
		if len(o.off) > 0 {
			fmt.Fprintf(out, "rules of the target checker switched off: %s\n", strings.Join(o.off, ", "))
		}
	}
	bar := newProgress(app, "runs", "bank-sim audit --target:", o.asJSON)
	rep, err := chaos.TargetAudit(c.Context(), chaos.TargetAuditConfig{Seed: seed, Intents: intents, Clients: o.clients, Off: o.off, Done: bar.update})
	bar.clear()
	if err != nil {
		if c.Context().Err() != nil {
			return c.Context().Err()
		}
		return runFailed(err)
	}
	if o.asJSON {
		if err := writeJSON(out, struct {
			chaos.TargetAuditReport
			Alone    map[string][]string `json:"alone"`
			BackedUp map[string]string   `json:"backedUp"`
			Failures []string            `json:"failures"`
			Passed   bool                `json:"passed"`
		}{rep, rep.Alone(), chaos.TargetBackedUp(), rep.Failures(), rep.Passed()}); err != nil {
			return err
		}
	} else {
		printTargetAudit(out, p, rep)
	}
	if !rep.Passed() {
		return errFailed
	}
	return nil
}

// printTargetAudit prints each reference target with the rule it must
// break alone and the rules it broke, then each rule with the flaws it
// alone catches (or the rule that backs it up), and the verdict.
func printTargetAudit(out io.Writer, p *palette, rep chaos.TargetAuditReport) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "reference target\tmust break alone\tbroke")
	for _, r := range append([]chaos.TargetAuditRow{rep.Clean}, rep.Rows...) {
		rule, broke := r.Rule, strings.Join(r.Broken, ", ")
		if rule == "" {
			rule = "nothing"
		}
		if broke == "" {
			broke = "nothing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Mistake, rule, broke)
	}
	_ = tw.Flush()

	fmt.Fprintln(out)
	fmt.Fprintln(out, "the flaws each rule of the target checker alone catches (their chaos --target run broke that rule only):")
	alone, backed := rep.Alone(), chaos.TargetBackedUp()
	tw = tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	for _, k := range chaos.TargetKinds() {
		flaws := strings.Join(alone[k], ", ")
		switch {
		case slices.Contains(rep.Off, k) && backed[k] != "":
			flaws = p.warn.Sprint("switched off") + p.dim.Sprint("; no flaw needs it alone: "+backed[k])
		case slices.Contains(rep.Off, k):
			flaws = p.warn.Sprint("switched off")
		case flaws == "" && backed[k] != "":
			flaws = p.dim.Sprint("none alone: " + backed[k])
		case flaws == "":
			flaws = p.bad.Sprint("none: no reference target needs this rule")
		}
		fmt.Fprintf(tw, "   %s\t%s\n", k, flaws)
	}
	_ = tw.Flush()

	if f := rep.Failures(); len(f) > 0 {
		fmt.Fprintf(out, "\n%s %s\n", p.bad.Sprint("target audit FAILED:"), p.dim.Sprintf("(seed %d)", rep.Seed))
		for _, line := range f {
			fmt.Fprintf(out, "   - %s\n", line)
		}
		return
	}
	fmt.Fprintf(out, "\n%s: each flaw caught by its rule alone, the correct reference target by none %s\n",
		p.ok.Sprint("target audit passed"), p.dim.Sprintf("(seed %d)", rep.Seed))
}
