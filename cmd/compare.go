package cmd

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func newCompareCmd(app *App) *cobra.Command {
	var seed string
	c := &cobra.Command{
		Use:   "compare NAME",
		Short: "Run a story and show its unprotected and protected runs side by side",
		Long: `Run one story and print its runs side by side in one table: for every
attempt, what the client was told, the money the server moved for it and the
balances right after; then the ledger and the invariants at the end, and what
differed between the run without protection and the run with it.

A story with a single run has nothing to compare: compare says so and how
to watch it, runs nothing and exits 0.

Exit code 0 when the story passed (or has a single run), 1 when it failed,
2 for a usage error, 3 when PostgreSQL could not be started or reached.`,
		Example: `  bank-sim compare lost-response
  bank-sim compare double-tap --seed 7`,
		Args: cobra.ExactArgs(1),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return scenarios.Names(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			list, err := pickScenarios(false, args)
			if err != nil {
				return err
			}
			s := list[0]
			if !hasControl(s) {
				// A valid story, not a mistake on the command line: said on
				// stdout, exit 0.
				fmt.Fprintf(app.Env.Stdout, "%s has a single run, with nothing to compare it to; watch it with 'bank-sim scenario %s'\n", s.Name, s.Name)
				return nil
			}
			n, err := seedFlag(app, c, seed)
			if err != nil {
				return err
			}
			return runCompare(c, app, s, n)
		},
	}
	c.Flags().StringVar(&seed, "seed", "", "seed for every random choice (default: a new one)")
	return c
}

func runCompare(c *cobra.Command, app *App, s scenarios.Scenario, seed uint64) error {
	ctx := c.Context()
	out, p := app.Env.Stdout, app.palette()
	fmt.Fprintf(out, "bank-sim %s · seed %d (repeat this run with --seed %d)\n", version(), seed, seed)
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	printWrapped(out, app.describe(srv), app.Env.Width, p.dim)
	dbs, wait := scenarios.AsyncBanks(srv)
	rep, err := scenarios.ExecuteWith(ctx, s, dbs, seed, nil, scenarios.Options{Snapshots: true})
	wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	compareTable(out, p, s, rep, wrapOr(app.Env.Width, 80))
	if !rep.Passed {
		return errFailed
	}
	return nil
}

// attemptRow is one attempt of one phase, as compare shows it.
type attemptRow struct {
	label, answer, moved, after string
	setup                       bool // Run.SendSetup: it only sets the story up
}

// attemptRows lists the attempts of a phase that the story tells, with the
// money each moved and the balances right after, from the server's events
// of the same request.
func attemptRows(pr scenarios.PhaseReport) []attemptRow {
	h := newHumanizer(pr.Labels)
	moved := map[int]int64{}
	transfers := map[int][]int64{}
	after := map[int]string{}
	reached := map[int]bool{}
	for _, e := range pr.Events {
		if e.Delivery == 0 {
			continue
		}
		switch e.Kind {
		case scenarios.KindDatabase:
			moved[e.Delivery] += e.Moved
			transfers[e.Delivery] = append(transfers[e.Delivery], e.Transfers...)
		case scenarios.KindArrive:
			// A server that dies after its commit never answers, but the
			// request reached it and its transfer stands.
			reached[e.Delivery] = true
		case scenarios.KindAnswer:
			reached[e.Delivery] = true
			if e.Ledger != "" {
				after[e.Delivery] = e.Ledger
			}
		}
	}
	var rows []attemptRow
	for _, e := range pr.Events {
		// Setup attempts too: what the server did with them later can be
		// the difference (crash-takeover's server A waking up).
		if e.Kind != scenarios.KindAttempt {
			continue
		}
		label, answer, ok := strings.Cut(h.text(e.Text), ": ")
		if !ok {
			label, answer = "", h.text(e.Text)
		}
		answer = receiptTail.ReplaceAllString(answer, "$1")
		row := attemptRow{label: strings.TrimSpace(label), answer: answer, moved: "—", after: "—", setup: e.Setup}
		if e.Delivery == 0 {
			// An answer that is not a transfer's (Run.Answered): no money
			// to show.
			row.moved, row.after = "", ""
		} else if reached[e.Delivery] {
			row.moved = "moved nothing"
			if m := moved[e.Delivery]; m > 0 {
				row.moved = fmt.Sprintf("moved %s (transfer %s)", bank.Naira(m), joinInts(transfers[e.Delivery]))
			}
		} else if e.Delivery != 0 {
			row.moved = "never reached a server"
		}
		if l, ok := after[e.Delivery]; ok {
			row.after = balancesOnly(l)
		}
		rows = append(rows, row)
	}
	return rows
}

// receiptTail is the part of an answer that compare leaves out: the
// amount and the names are the same in every column.
var receiptTail = regexp.MustCompile(`(transfer \d+), ₦[\d,.]+ from [\w ]+ to [\w ]+`)

func joinInts(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// balancesOnly is a ledger line's balances without the accounts still at
// their opening balance: "Ada ₦40,000, Bola ₦15,000".
func balancesOnly(line string) string {
	accounts, _, _ := strings.Cut(line, " | ")
	var changed []string
	for _, part := range strings.Split(accounts, ", ") {
		same := false
		for _, a := range bank.LessonAccounts {
			if part == a.FirstName()+" "+bank.Naira(a.BalanceKobo) {
				same = true
			}
		}
		if !same {
			changed = append(changed, part)
		}
	}
	if len(changed) == 0 {
		return "balances as they opened"
	}
	return strings.Join(changed, ", ")
}

// phaseName is a phase's title up to its colon: "without protection".
func phaseName(title string) string {
	name, _, _ := strings.Cut(title, ":")
	return name
}

// phaseNames names each phase for compare's columns: its title up to the
// colon, numbered when two phases share it ("without protection 1").
func phaseNames(phases []scenarios.PhaseReport) []string {
	count := map[string]int{}
	for _, pr := range phases {
		count[phaseName(pr.Title)]++
	}
	seen := map[string]int{}
	names := make([]string, len(phases))
	for i, pr := range phases {
		n := phaseName(pr.Title)
		if count[n] > 1 {
			seen[n]++
			n = fmt.Sprintf("%s %d", n, seen[n])
		}
		names[i] = n
	}
	return names
}

// setupEverywhere reports whether the attempt called label only sets the
// story up and went the same way in every run: the table leaves it out.
func setupEverywhere(byLabel []map[string]attemptRow, label string) bool {
	first, ok := byLabel[0][label]
	if !ok || !first.setup {
		return false
	}
	for _, rows := range byLabel[1:] {
		if r, ok := rows[label]; !ok || r != first {
			return false
		}
	}
	return true
}

// ledgerInvariant are the invariants every phase is judged on, read from the
// ledger and the clients' answers, which compare's table shows already.
var ledgerInvariant = map[string]bool{
	bank.InvTotal: true, bank.InvNegative: true, bank.InvOnce: true, bank.InvTruth: true, bank.InvLedger: true,
}

// outcome is what an attempt got, and the money it moved if it was a
// transfer's.
func (r attemptRow) outcome() string {
	if r.moved == "" {
		return r.answer
	}
	return r.answer + " and " + r.moved
}

// compareTable prints the story's phases side by side.
func compareTable(out io.Writer, p *palette, s scenarios.Scenario, rep scenarios.Report, cols int) {
	fmt.Fprintf(out, "\n%s\n", p.head.Sprintf("━━ compare %s · %s", s.Name, s.DisplayTitle()))
	phases := rep.Phases
	rows := make([][]attemptRow, len(phases))
	for i, pr := range phases {
		rows[i] = attemptRows(pr)
	}
	// Attempts are matched by their label ("attempt 2", "copy 1", "later"),
	// in the order they first appear: concurrent copies may be answered in
	// another order in each run.
	var order []string
	byLabel := make([]map[string]attemptRow, len(phases))
	for i := range phases {
		byLabel[i] = map[string]attemptRow{}
		seen := map[string]int{}
		for _, r := range rows[i] {
			seen[r.label]++
			key := r.label
			if seen[r.label] > 1 {
				key = fmt.Sprintf("%s (%d)", r.label, seen[r.label])
			}
			r.label = key
			if _, dup := byLabel[i][key]; !dup {
				byLabel[i][key] = r
			}
			if !slices.Contains(order, key) {
				order = append(order, key)
			}
		}
	}
	labelW := 14
	for _, label := range order {
		labelW = max(labelW, min(width(label), 20))
	}
	colW := max((cols-labelW-2*len(phases))/len(phases), 16)
	t := &table{out: out, p: p, label: labelW, col: colW}

	names := phaseNames(phases)
	var head [][]string
	for _, n := range names {
		head = append(head, []string{n})
	}
	t.multiStyled("", head, p.bold)
	t.rule(len(phases))
	same := 0
	for _, label := range order {
		if setupEverywhere(byLabel, label) {
			same++
			continue
		}
		cells := make([][]string, len(phases))
		for j := range phases {
			r, ok := byLabel[j][label]
			if !ok {
				cells[j] = []string{"—"}
				continue
			}
			cells[j] = []string{r.answer}
			for _, more := range []string{r.moved, r.after} {
				if more != "" {
					cells[j] = append(cells[j], more)
				}
			}
		}
		t.multi(label, cells)
	}
	if same > 0 {
		fmt.Fprintln(out, p.dim.Sprintf("(%s that only set the story up, the same in every run, left out)",
			countOf(same, "request", "requests")))
	}
	t.rule(len(phases))
	var end, inv [][]string
	for _, pr := range phases {
		_, rest, _ := strings.Cut(pr.Balances, " | ")
		end = append(end, []string{balancesOnly(pr.Balances), rest})
		var broke []string
		for _, c := range pr.Invariants {
			if !c.OK {
				broke = append(broke, c.Name)
			}
		}
		if len(broke) == 0 {
			inv = append(inv, []string{fmt.Sprintf("all %d hold", len(pr.Invariants))})
		} else {
			inv = append(inv, []string{"broke: " + strings.Join(broke, ", ")})
		}
	}
	t.multi("in the end", end)
	t.multi("invariants", inv)

	fmt.Fprintf(out, "\n%s\n", p.bold.Sprint("what differed"))
	var controls, protected []int
	for i, pr := range phases {
		if pr.Control {
			controls = append(controls, i)
		} else {
			protected = append(protected, i)
		}
	}
	for _, j := range protected {
		for _, c := range controls {
			if len(controls)*len(protected) > 1 {
				fmt.Fprintf(out, "%s\n", p.dim.Sprintf("%s, against %s:", names[j], names[c]))
			}
			said := false
			bullet := func(text string) {
				said = true
				for i, l := range wrap(text, cols-4) {
					lead := "  • "
					if i > 0 {
						lead = "    "
					}
					fmt.Fprintf(out, "%s%s\n", lead, l)
				}
			}
			for _, label := range order {
				a, inA := byLabel[c][label]
				b, inB := byLabel[j][label]
				switch {
				case inA && inB && (a.answer != b.answer || a.moved != b.moved):
					bullet(fmt.Sprintf("%s: %s without protection; %s with it", label, a.outcome(), b.outcome()))
				case inA && !inB:
					bullet(fmt.Sprintf("%s: only without protection (%s)", label, a.answer))
				case inB && !inA:
					bullet(fmt.Sprintf("%s: only with protection (%s)", label, b.answer))
				}
			}
			if phases[c].Balances != phases[j].Balances {
				bullet("in the end: " + endDiff(phases[c].Balances, phases[j].Balances))
			}
			// What the clients were told and the ledger do not show (an
			// SMS, an event, a parcel) the invariants say; those of the
			// ledger only when nothing else differed.
			if !said {
				fmt.Fprintln(out, "  • nothing the clients or the ledger can see; beyond them:")
			}
			kept := map[string]string{}
			for _, inv := range phases[j].Invariants {
				if inv.OK {
					kept[inv.Name] = inv.Detail
				}
			}
			for _, inv := range phases[c].Invariants {
				detail, ok := kept[inv.Name]
				if !ok || inv.OK || (said && ledgerInvariant[inv.Name]) {
					continue
				}
				bullet(inv.Name)
				for _, l := range wrap("without protection: "+fewCases(newHumanizer(phases[c].Labels).text(inv.Detail), ""), cols-6) {
					fmt.Fprintf(out, "      %s\n", l)
				}
				for _, l := range wrap("with it: "+newHumanizer(phases[j].Labels).text(detail), cols-6) {
					fmt.Fprintf(out, "      %s\n", l)
				}
			}
		}
	}
	status := p.ok.Sprint("PASS")
	if !rep.Passed {
		status = p.bad.Sprint("FAIL")
	}
	fmt.Fprintf(out, "\n%s %s %s\n", status, rep.Scenario, p.dim.Sprintf("(%s)", humanDuration(rep.Duration.Round(time.Millisecond))))
}

// table prints a row label and columns of wrapped cells.
type table struct {
	out        io.Writer
	p          *palette
	label, col int
}

func (t *table) rule(n int) {
	fmt.Fprintln(t.out, t.p.dim.Sprint(strings.Repeat("─", t.label+n*(t.col+2))))
}

// multi prints one row whose cells hold several lines each, wrapped.
func (t *table) multi(label string, cells [][]string) { t.multiStyled(label, cells, plain{}) }

func (t *table) multiStyled(label string, cells [][]string, style colorer) {
	cols := make([][]string, len(cells))
	height := 0
	for i, c := range cells {
		for _, text := range c {
			cols[i] = append(cols[i], wrap(text, t.col)...)
		}
		height = max(height, len(cols[i]))
	}
	labels := wrap(label, t.label)
	height = max(height, len(labels))
	for l := range height {
		line := ""
		if l < len(labels) {
			line = labels[l]
		}
		line = pad(line, t.label)
		for _, c := range cols {
			cell := ""
			if l < len(c) {
				cell = c[l]
			}
			line += "  " + pad(cell, t.col)
		}
		fmt.Fprintln(t.out, style.Sprint(strings.TrimRight(line, " ")))
	}
}

// endDiff says how two ledger lines differ: "Ada ₦30,000 against ₦40,000,
// transfers 2 against 1".
func endDiff(a, b string) string {
	fields := func(line string) ([]string, []string) {
		accounts, rest, _ := strings.Cut(line, " | ")
		var names, values []string
		for _, part := range strings.Split(accounts, ", ") {
			name, value, _ := strings.Cut(part, " ")
			names, values = append(names, name), append(values, value)
		}
		for _, part := range strings.Split(rest, " | ") {
			name, value, _ := strings.Cut(part, " ")
			names, values = append(names, name), append(values, value)
		}
		return names, values
	}
	na, va := fields(a)
	nb, vb := fields(b)
	var diffs []string
	for i := range min(len(na), len(nb)) {
		if na[i] == nb[i] && va[i] != vb[i] {
			diffs = append(diffs, fmt.Sprintf("%s %s without protection, %s with it", na[i], va[i], vb[i]))
		}
	}
	if len(diffs) == 0 || len(na) != len(nb) {
		return a + " against " + b
	}
	return strings.Join(diffs, "; ")
}
