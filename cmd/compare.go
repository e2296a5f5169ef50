package cmd

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func newCompareCmd(app *App) *cobra.Command {
	var seed, html string
	c := &cobra.Command{
		Use:   "compare NAME",
		Short: "Run a story and show its unprotected and protected runs side by side",
		Long: `Run one story and print its runs side by side in one table: for every
attempt, what the client was told, the money the server moved for it and the
balances right after; then the ledger and the invariants at the end, and what
differed between the run without protection and the run with it.

A story with a single run has nothing to compare: compare says so and how
to watch it, runs nothing and exits 0.

--html FILE also writes the comparison as one self-contained HTML page (no
network needed to view it; it prints).

Exit code 0 when the story passed (or has a single run), 1 when it failed,
2 for a usage error, 3 when PostgreSQL could not be started or reached.`,
		Example: `  bank-sim compare lost-response
  bank-sim compare double-tap --seed 7
  bank-sim compare lost-response --html compare.html`,
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
			if html != "" {
				if err := checkWritableFlag("--html", html); err != nil {
					return err
				}
			}
			if !hasControl(s) {
				// A valid story, not a mistake on the command line: said on
				// stdout, exit 0.
				fmt.Fprintf(app.Env.Stdout, "%s has a single run, with nothing to compare it to; watch it with 'bank-sim scenario %s'\n", s.Name, s.Name)
				if html != "" {
					fmt.Fprintf(app.Env.Stderr, "bank-sim compare: no HTML report written (nothing to compare); 'bank-sim scenario %s' tells the story\n", s.Name)
				}
				return nil
			}
			n, err := seedFlag(app, c, seed)
			if err != nil {
				return err
			}
			return runCompare(c, app, s, n, html)
		},
	}
	c.Flags().StringVar(&seed, "seed", "", "seed for every random choice (default: a new one)")
	addHTMLFlag(c.Flags(), &html)
	return c
}

func runCompare(c *cobra.Command, app *App, s scenarios.Scenario, seed uint64, html string) error {
	ctx := c.Context()
	out, p := app.Env.Stdout, app.palette()
	fmt.Fprintf(out, "bank-sim %s · seed %d (repeat this run with --seed %d)\n", version(), seed, seed)
	var srv *postgres.Server
	if s.OwnServers {
		printWrapped(out, ownServersNote(app, []scenarios.Scenario{s}), app.Env.Width, p.dim)
	} else {
		var err error
		if srv, err = app.Server(ctx); err != nil {
			return err
		}
		printWrapped(out, app.describe(srv), app.Env.Width, p.dim)
	}
	dbs := banks.OnServer(srv, banks.Options{Async: true})
	rep, err := scenarios.ExecuteWith(ctx, s, dbs, seed, nil, scenarios.Options{Snapshots: true})
	dbs.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	compareTable(out, p, s, rep, wrapOr(app.Env.Width, 80))
	if html != "" {
		if err := writeHTML(app.Env, html, htmlreport.CompareDoc(compareHTML(s, rep, seed))); err != nil {
			return err
		}
	}
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

// compareModel is what compare shows, for the terminal and the HTML report
// alike: the phases' attempts matched by label, the end and the invariants,
// and what differed.
type compareModel struct {
	names []string
	// labels are every attempt's, the left-out ones too (they set the
	// label column's width).
	labels []string
	// rows are the attempts the table shows, in the order they first
	// appear; same counts those left out (set-up requests alike in every
	// run).
	rows []compareRow
	same int
	// end and inv are each phase's ledger and invariants at the end.
	end, inv [][]string
	invOK    []bool
	diffs    []diffGroup
}

// compareRow is one attempt across the phases: nil cells where a phase has
// no such attempt.
type compareRow struct {
	label string
	cells []*attemptRow
}

// diffGroup is what differed between one protected phase and one control.
type diffGroup struct {
	protected, control string
	// header: there are several pairs, so each says which it is.
	header bool
	items  []diffItem
}

// diffItem is one bullet; plain is a line said without a bullet (the note
// that nothing visible differed); sub are its indented lines.
type diffItem struct {
	text  string
	sub   []string
	plain bool
}

func newCompareModel(rep scenarios.Report) compareModel {
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
	m := compareModel{names: phaseNames(phases), labels: order}
	for _, label := range order {
		if setupEverywhere(byLabel, label) {
			m.same++
			continue
		}
		row := compareRow{label: label, cells: make([]*attemptRow, len(phases))}
		for j := range phases {
			if r, ok := byLabel[j][label]; ok {
				row.cells[j] = &r
			}
		}
		m.rows = append(m.rows, row)
	}
	for _, pr := range phases {
		_, rest, _ := strings.Cut(pr.Balances, " | ")
		m.end = append(m.end, []string{balancesOnly(pr.Balances), rest})
		var broke []string
		for _, c := range pr.Invariants {
			if !c.OK {
				broke = append(broke, c.Name)
			}
		}
		m.invOK = append(m.invOK, len(broke) == 0)
		if len(broke) == 0 {
			m.inv = append(m.inv, []string{fmt.Sprintf("all %d hold", len(pr.Invariants))})
		} else {
			m.inv = append(m.inv, []string{"broke: " + strings.Join(broke, ", ")})
		}
	}

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
			g := diffGroup{protected: m.names[j], control: m.names[c], header: len(controls)*len(protected) > 1}
			said := false
			bullet := func(text string) {
				said = true
				g.items = append(g.items, diffItem{text: text})
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
				g.items = append(g.items, diffItem{text: "nothing the clients or the ledger can see; beyond them:", plain: true})
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
				g.items = append(g.items, diffItem{text: inv.Name, sub: []string{
					"without protection: " + fewCases(newHumanizer(phases[c].Labels).text(inv.Detail), ""),
					"with it: " + newHumanizer(phases[j].Labels).text(detail),
				}})
			}
			m.diffs = append(m.diffs, g)
		}
	}
	return m
}

// lines are what a cell of compare's table says, one fact a line.
func (r *attemptRow) lines() []string {
	if r == nil {
		return []string{"—"}
	}
	out := []string{r.answer}
	for _, more := range []string{r.moved, r.after} {
		if more != "" {
			out = append(out, more)
		}
	}
	return out
}

// compareHTML is compare's model as the HTML report takes it. seed is the
// run's, the one --seed repeats: rep.Seed is the story's own, derived from
// it, and would repeat nothing.
func compareHTML(s scenarios.Scenario, rep scenarios.Report, seed uint64) htmlreport.Compare {
	m := newCompareModel(rep)
	status := "PASS"
	if !rep.Passed {
		status = "FAIL"
	}
	c := htmlreport.Compare{Story: s.Name, Title: s.DisplayTitle(), Seed: seed, Passed: rep.Passed,
		Verdict:  status + " " + rep.Scenario + ": " + rep.Verdict,
		Duration: humanDuration(rep.Duration.Round(time.Millisecond)), LeftOut: m.same, End: m.end}
	for i, pr := range rep.Phases {
		c.Runs = append(c.Runs, htmlreport.CompareRun{Name: m.names[i], Control: pr.Control, Passed: pr.Passed, Verdict: pr.Verdict})
		c.Invariants = append(c.Invariants, htmlreport.CompareInvariants{Held: m.invOK[i], Words: m.inv[i][0]})
	}
	for _, r := range m.rows {
		row := htmlreport.CompareRow{Label: r.label}
		for _, cell := range r.cells {
			if cell == nil {
				row.Cells = append(row.Cells, nil)
			} else {
				row.Cells = append(row.Cells, cell.lines())
			}
		}
		// As "what differed" says it: another answer, other money, or an
		// attempt only one run made.
		for _, cell := range r.cells[1:] {
			a, b := r.cells[0], cell
			if (a == nil) != (b == nil) || a != nil && (a.answer != b.answer || a.moved != b.moved) {
				row.Differs = true
			}
		}
		c.Rows = append(c.Rows, row)
	}
	for _, g := range m.diffs {
		d := htmlreport.CompareDiff{Protected: g.protected, Control: g.control}
		for _, it := range g.items {
			d.Items = append(d.Items, htmlreport.CompareDiffItem{Text: it.text, Sub: it.sub, Plain: it.plain})
		}
		c.Differed = append(c.Differed, d)
	}
	return c
}

// compareTable prints the story's phases side by side.
func compareTable(out io.Writer, p *palette, s scenarios.Scenario, rep scenarios.Report, cols int) {
	fmt.Fprintf(out, "\n%s\n", p.head.Sprintf("━━ compare %s · %s", s.Name, s.DisplayTitle()))
	phases := rep.Phases
	m := newCompareModel(rep)
	labelW := 14
	for _, label := range m.labels {
		labelW = max(labelW, min(width(label), 20))
	}
	colW := max((cols-labelW-2*len(phases))/len(phases), 16)
	t := &table{out: out, p: p, label: labelW, col: colW}

	var head [][]string
	for _, n := range m.names {
		head = append(head, []string{n})
	}
	t.multiStyled("", head, p.bold)
	t.rule(len(phases))
	for _, r := range m.rows {
		cells := make([][]string, len(phases))
		for j, c := range r.cells {
			cells[j] = c.lines()
		}
		t.multi(r.label, cells)
	}
	if m.same > 0 {
		fmt.Fprintln(out, p.dim.Sprintf("(%s that only set the story up, the same in every run, left out)",
			countOf(m.same, "request", "requests")))
	}
	t.rule(len(phases))
	t.multi("in the end", m.end)
	t.multi("invariants", m.inv)

	fmt.Fprintf(out, "\n%s\n", p.bold.Sprint("what differed"))
	for _, g := range m.diffs {
		if g.header {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("%s, against %s:", g.protected, g.control))
		}
		for _, it := range g.items {
			if it.plain {
				fmt.Fprintf(out, "  • %s\n", it.text)
				continue
			}
			for i, l := range wrap(it.text, cols-4) {
				lead := "  • "
				if i > 0 {
					lead = "    "
				}
				fmt.Fprintf(out, "%s%s\n", lead, l)
			}
			for _, s := range it.sub {
				for _, l := range wrap(s, cols-6) {
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
