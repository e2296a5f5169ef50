package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/spf13/cobra"
)

type auditOptions struct {
	seed     string
	intents  int
	clients  int
	parallel int
	asJSON   bool
	html     string
	off      []string
	target   bool
}

func newAuditCmd(app *App) *cobra.Command {
	var o auditOptions
	c := &cobra.Command{
		Use:   "audit",
		Short: "Prove the checks' power: run every known mistake and show which checks catch it",
		Long: `Run the correct handler and then each of the lesson's mistakes ('bank-sim list
--bugs') against the protected phases of every scenario and a short seeded
chaos run, and print the matrix: bug × check, caught or missed, and the kill
ratio. A bug is caught when a protected phase fails or the chaos checker
finds a violation. The chaos runs use the audit's own fault rates (every
kind at 3% or more). The correct handler's chaos column must break no rule
and exercise every defence, or it proves nothing about the defence it
missed: a run that broke no rule but happened not to reach a rare path is
followed by a run on the next seed (--seed N+1, …), up to 4 runs, until
the runs together reached every path. A bug's chaos run that broke no rule
is followed the same way, up to 4 runs, until one breaks a rule: a mistake
on a rare path gets the chances the correct handler's column gets, and the
report names the seed that caught it.

Exit code 0 when every bug is caught by at least one check, the correct
handler by none, and its chaos runs together exercised every defence; 1
when a bug was missed or the correct handler caught; 4 when neither, but
even 4 runs never reached some defence (INCONCLUSIVE: the report names
it); 3 when PostgreSQL is unavailable.

After the matrix, each rule of the chaos checker is listed with the
mistakes it alone catches: no scenario caught them, and their chaos run
broke that rule and no other. --off RULE switches a rule off (repeat it, or
give a list: --off key-lost,replay-differs): the chaos runs are judged
without it, so a mistake only that rule caught shows as MISSED, the report
names the rule that alone caught it, and the audit fails. A rule another
implies (total-not-conserved, by balance-ledger-differs at the end) is
listed with the rule that backs it up.

--target audits the target checker (chaos --target) instead: each
reference target of the zoo (a small in-memory server speaking the lesson's
contract, with one flaw) meets a short seeded chaos --target run in this
process, and each rule is listed with the flaws it alone catches. No
PostgreSQL is needed. --off RULE switches a rule of the target checker off;
the audit fails (exit 1), naming the rule and the flaw it let through.

--html FILE also writes the matrix as one self-contained HTML page: a
symbol, a word and a colour in every cell, each cell's evidence a click
away, the totals; it opens offline and prints.`,
		Example: `  bank-sim audit
  bank-sim audit --seed 7 --json
  bank-sim audit --html audit.html
  bank-sim audit --off key-lost
  bank-sim audit --target --off replay-differs`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runAudit(c, app, o) },
	}
	f := c.Flags()
	f.StringVar(&o.seed, "seed", "", "seed for the scenarios and the chaos runs (default: a new one)")
	f.IntVar(&o.intents, "intents", chaos.AuditIntents, "intents in each chaos run (at the audit's fault rates, every fault kind at 3% or more)")
	f.IntVar(&o.clients, "clients", 8, "clients in each chaos run")
	f.IntVar(&o.parallel, "parallel", 4, "runs at once")
	f.BoolVar(&o.asJSON, "json", false, "print the matrix as JSON")
	f.StringSliceVar(&o.off, "off", nil, "switch off the chaos checker's `RULE` (a kind, as 'bank-sim audit' lists them; with --target, the target checker's): its chaos runs are judged without it")
	f.BoolVar(&o.target, "target", false, "audit the target checker (chaos --target) with the reference targets' flaws instead (no PostgreSQL needed)")
	addHTMLFlag(f, &o.html)
	return c
}

func runAudit(c *cobra.Command, app *App, o auditOptions) error {
	seed, err := seedFlag(app, c, o.seed)
	if err != nil {
		return err
	}
	switch {
	case o.intents < 1:
		return usageError("--intents %d: give a positive number", o.intents)
	case o.clients < 1 || o.clients > 64:
		return usageError("--clients %d: give 1 to 64", o.clients)
	case o.parallel < 1 || o.parallel > 16:
		return usageError("--parallel %d: give 1 to 16", o.parallel)
	}
	if o.target {
		return runTargetAudit(c, app, o, seed)
	}
	for _, r := range o.off {
		if !slices.Contains(chaos.Kinds(), r) {
			return usageError("--off %q: no such rule of the chaos checker; give one of %s", r, strings.Join(chaos.Kinds(), ", "))
		}
	}
	if o.html != "" {
		if err := checkWritableFlag("--html", o.html); err != nil {
			return err
		}
	}
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · audit · seed %d (repeat this run with --seed %d)\n", version(), seed, seed)
		if len(o.off) > 0 {
			fmt.Fprintf(out, "rules switched off in the chaos runs: %s\n", strings.Join(o.off, ", "))
		}
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	cfg := chaos.AuditConfig{Seed: seed, Parallel: o.parallel,
		Chaos: chaos.Config{Intents: o.intents, Clients: o.clients}, Off: o.off}
	bar := newProgress(app, "runs", "bank-sim audit:", o.asJSON)
	cfg.Done = bar.update
	rep, err := chaos.Audit(ctx, banks.OnServer(srv, banks.Options{}), cfg)
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return runFailed(err)
	}
	if o.asJSON {
		caught, total := rep.KillRatio()
		if err := writeJSON(out, struct {
			chaos.AuditReport
			Caught  int    `json:"caught"`
			Total   int    `json:"total"`
			Passed  bool   `json:"passed"`
			Verdict string `json:"verdict"`
		}{rep, caught, total, rep.Passed(), rep.Verdict()}); err != nil {
			return err
		}
	} else {
		printAudit(out, p, rep)
	}
	if o.html != "" {
		if err := writeHTML(app.Env, o.html, htmlreport.Audit(rep)); err != nil {
			return err
		}
	}
	return auditExit(rep)
}

// auditExit is the audit's exit: 1 for a bug missed or a false alarm, 4
// when the correct handler's chaos runs never reached some defence (it is
// not failed for a path its runs happened not to reach), else 0.
func auditExit(rep chaos.AuditReport) error {
	switch rep.Verdict() {
	case chaos.Invalid:
		return errFailed
	case chaos.Inconclusive:
		return errInconclusive
	}
	return nil
}

// printAudit prints the matrix with numbered columns and their legend, then
// what first broke for each bug, and the verdict.
func printAudit(out io.Writer, p *palette, rep chaos.AuditReport) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	head := []string{"bug"}
	for i := range rep.Columns {
		head = append(head, fmt.Sprint(i+1))
	}
	head = append(head, "verdict")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	row := func(r chaos.AuditRow, clean bool) {
		cells := []string{r.Bug}
		for _, c := range rep.Columns {
			if r.Caught[c] {
				cells = append(cells, "✗")
			} else {
				cells = append(cells, "·")
			}
		}
		switch {
		case clean && r.Any():
			cells = append(cells, p.bad.Sprint("FALSE ALARM"))
		case clean:
			cells = append(cells, p.ok.Sprint("clean"))
		case r.Any():
			cells = append(cells, p.ok.Sprint("caught"))
		default:
			cells = append(cells, p.bad.Sprint("MISSED"))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	row(rep.Clean, true)
	for _, r := range rep.Rows {
		row(r, false)
	}
	_ = tw.Flush()
	fmt.Fprintln(out, p.dim.Sprint("✗ = this check caught the bug · = it did not"))
	var legend []string
	for i, c := range rep.Columns {
		legend = append(legend, fmt.Sprintf("%d %s", i+1, c))
	}
	fmt.Fprintln(out, p.dim.Sprint("checks: "+strings.Join(legend, ", ")))

	fmt.Fprintln(out)
	for _, r := range append([]chaos.AuditRow{rep.Clean}, rep.Rows...) {
		for _, c := range rep.Columns {
			if why, ok := r.Why[c]; ok {
				fmt.Fprintf(out, "%s × %s: %s\n", p.bold.Sprint(r.Bug), c, p.dim.Sprint(firstLine(why)))
				break
			}
		}
		if !r.Any() && len(r.Silenced) > 0 {
			fmt.Fprintf(out, "%s MISSED: only the rule switched off caught it (%s)\n", p.bold.Sprint(r.Bug), strings.Join(r.Silenced, ", "))
		}
	}
	printAlone(out, p, rep)
	seeds := make([]string, len(rep.Clean.Seeds))
	for i, s := range rep.Clean.Seeds {
		seeds[i] = fmt.Sprint(uint64(s))
	}
	if len(seeds) > 1 && !rep.Clean.Any() {
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("the correct handler's chaos column: %d runs (seeds %s), whose coverage is judged together: one that happened not to reach a rare path was followed by the next seed's",
			len(seeds), strings.Join(seeds, ", ")))
	}
	if len(rep.Clean.Missing) > 0 && !rep.Clean.Any() {
		fmt.Fprintf(out, "\n%s the correct handler broke no rule, but its chaos runs (seeds %s) together never exercised:\n", p.warn.Sprint("INCONCLUSIVE chaos column:"), strings.Join(seeds, ", "))
		for _, m := range rep.Clean.Missing {
			fmt.Fprintf(out, "   - %s\n", m)
		}
	}
	caught, total := rep.KillRatio()
	line := fmt.Sprintf("kill ratio %d/%d", caught, total)
	switch rep.Verdict() {
	case chaos.Valid:
		fmt.Fprintf(out, "\n%s: every bug caught, the correct handler by none %s\n", p.ok.Sprint(line), p.dim.Sprintf("(seed %d)", rep.Seed))
		return
	case chaos.Inconclusive:
		fmt.Fprintf(out, "\n%s: every bug caught, the correct handler by none, but its chaos column cannot vouch for what it never exercised %s\n",
			p.warn.Sprint(line+": INCONCLUSIVE"), p.dim.Sprintf("(seed %d)", rep.Seed))
		return
	}
	fmt.Fprintf(out, "\n%s %s\n", p.bad.Sprint(line+": FAILED"), p.dim.Sprintf("(seed %d)", rep.Seed))
}

// printAlone lists each rule of the chaos checker with the mistakes it
// alone catches (chaos.AuditReport.Alone): the rules that earn their place
// in the audit, and those no built-in mistake needs.
func printAlone(out io.Writer, p *palette, rep chaos.AuditReport) {
	alone := rep.Alone()
	fmt.Fprintln(out)
	fmt.Fprintln(out, "the mistakes each rule of the chaos checker alone catches (no scenario caught them; their chaos run broke that rule only):")
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	for _, k := range chaos.Kinds() {
		bugs := p.dim.Sprint("none: no built-in mistake needs this rule")
		if note := chaos.AloneNote(k); note != "" {
			bugs = p.dim.Sprint("none: " + note)
		}
		if slices.Contains(rep.Off, k) {
			bugs = p.bad.Sprint("switched off (--off): the mistakes it alone caught are MISSED above")
		}
		if len(alone[k]) > 0 {
			bugs = strings.Join(alone[k], ", ")
		}
		fmt.Fprintf(tw, "   %s\t%s\n", k, bugs)
	}
	_ = tw.Flush()
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if r := []rune(s); len(r) > 160 {
		s = string(r[:157]) + "…"
	}
	return s
}
