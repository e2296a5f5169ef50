package htmlreport

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/banksim/bank-sim/chaos"
)

// The states of one cell of the audit's matrix. Each is said by a symbol, a
// word and a colour, so that the matrix reads printed in black and white.
const (
	// CellCaught: the check caught the mistake (good).
	CellCaught = "caught"
	// CellMissed: the check did not catch the mistake. Alone it is no
	// failure (each check is aimed at some mistakes); a row of them is.
	CellMissed = "missed"
	// CellInconclusive: a chaos run broke no rule but never exercised some
	// defence, so its "missed" proves nothing about that defence.
	CellInconclusive = "inconclusive"
	// CellNotRun: a first-catch audit left the cell out (an earlier check
	// had caught the mistake).
	CellNotRun = "not run"
	// CellClean: the correct handler passed the check (good).
	CellClean = "clean"
	// CellFalseAlarm: the check failed the correct handler (bad).
	CellFalseAlarm = "false alarm"
)

var cellLook = map[string]struct{ sym, class string }{
	CellCaught:       {"✓", "ok"},
	CellMissed:       {"·", "none"},
	CellInconclusive: {"?", "warn"},
	CellNotRun:       {"–", "none"},
	CellClean:        {"✓", "ok"},
	CellFalseAlarm:   {"✗", "bad"},
}

// AuditCell is the state of row × column, and the evidence behind it.
func AuditCell(row chaos.AuditRow, column string, correct bool) (state, evidence string) {
	caught, ran := row.Caught[column]
	why := row.Why[column]
	var chaosNote string
	if column == chaos.ChaosColumn && ran {
		seeds := make([]string, len(row.Seeds))
		for i, s := range row.Seeds {
			seeds[i] = fmt.Sprint(uint64(s))
		}
		runs := "the chaos run on seed "
		if len(seeds) > 1 {
			runs = "the chaos runs on seeds "
		}
		chaosNote = runs + strings.Join(seeds, ", ")
	}
	switch {
	case !ran:
		return CellNotRun, "not run: an earlier check had caught this mistake (a first-catch audit)"
	case correct && caught:
		return CellFalseAlarm, why
	case caught:
		if chaosNote != "" {
			return CellCaught, chaosNote + ": " + why
		}
		return CellCaught, why
	case column == chaos.ChaosColumn && len(row.Missing) > 0:
		return CellInconclusive, chaosNote + " broke no rule, but never exercised: " + strings.Join(row.Missing, "; ") +
			". It proves nothing about those defences."
	case correct:
		if chaosNote != "" {
			return CellClean, chaosNote + " broke no rule and exercised every defence"
		}
		return CellClean, "every protected phase held"
	case chaosNote != "":
		return CellMissed, chaosNote + " broke no rule"
	}
	return CellMissed, "every protected phase held: this story does not show this mistake"
}

const auditCSS = `
body { max-width: 1800px; }
.matrix-wrap { overflow-x: auto; }
table.matrix { font-size: .85rem; }
table.matrix th.check { vertical-align: bottom; padding: .3rem .15rem; }
table.matrix th.check span { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }
table.matrix td.cell { text-align: center; padding: .1rem .2rem; min-width: 2.6rem; position: relative; }
table.matrix td.cell .sym { display: block; font-size: 1.05rem; line-height: 1.1; font-weight: 700; }
table.matrix td.cell .word { display: block; font-size: .62rem; line-height: 1.1; }
table.matrix td.cell summary { list-style: none; cursor: pointer; }
table.matrix td.cell summary::-webkit-details-marker { display: none; }
table.matrix td.cell details[open] > .why { position: absolute; z-index: 3; left: 0; top: 100%; width: 26rem; text-align: left;
  background: var(--bg); border: 1px solid var(--ink); padding: .4rem .6rem; white-space: pre-wrap; font-size: .8rem; box-shadow: 0 2px 8px rgba(0,0,0,.2); }
table.matrix td.cell.ok { background: #e8f5ec; color: var(--ok); }
table.matrix td.cell.bad { background: #fde8e8; color: var(--bad); }
table.matrix td.cell.warn { background: #fff4d6; color: var(--warn); }
table.matrix td.cell.none { color: var(--muted); }
table.matrix tbody.correct { border-bottom: 4px double var(--ink); }
table.matrix tbody.correct th.row { font-style: italic; }
table.matrix tr.group th { background: var(--bg); border: none; padding-top: .6rem; font-size: .8rem; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
table.matrix tr.missed-row th.row, table.matrix tr.missed-row th.row a { color: var(--bad); }
table.matrix tr.missed-row th.row::before { content: "✗ "; }
table.matrix tr.missed-row td.cell { background: #fde8e8; color: var(--bad); }
table.matrix th.row a { color: inherit; }
table.matrix th.row { white-space: nowrap; }
table.matrix td.rowverdict { white-space: nowrap; font-weight: 600; }
table.matrix tfoot td, table.matrix tfoot th { font-weight: 700; background: var(--soft); }
.legend span.mk { display: inline-block; min-width: 1.4rem; text-align: center; font-weight: 700; }
dl.mistakes dt { font-weight: 700; margin-top: .4rem; }
dl.mistakes dd { margin-left: 1.2rem; }
@media print {
  @page { size: landscape; }
  table.matrix { font-size: 7pt; }
  table.matrix td.cell { background: none !important; }
  table.matrix td.cell details > .why { display: none; }
}
`

// auditScript lets one cell's evidence be open at a time, and Escape close
// it: the evidence is a popover over the matrix.
const auditScript = `
document.querySelectorAll('table.matrix td.cell details').forEach(function (d) {
  d.addEventListener('toggle', function () {
    if (!d.open) return;
    document.querySelectorAll('table.matrix td.cell details[open]').forEach(function (o) { if (o !== d) o.open = false; });
  });
});
document.addEventListener('keydown', function (e) {
  if (e.key !== 'Escape') return;
  document.querySelectorAll('table.matrix td.cell details[open]').forEach(function (o) { o.open = false; });
});
`

// Audit renders an audit: the matrix of mistakes × checks, the correct
// handler's row first and set apart, every cell's evidence a click away,
// and the totals.
func Audit(rep chaos.AuditReport) *Doc {
	caught, total := rep.KillRatio()
	d := &Doc{Kind: "audit", Title: "audit: every mistake against every check",
		Subtitle: fmt.Sprintf("seed %d (repeat with --seed %d) · %d mistakes × %d checks", rep.Seed, rep.Seed, len(rep.Rows), len(rep.Columns))}
	totals := fmt.Sprintf("%d of %d caught", caught, total)
	switch rep.Verdict() {
	case chaos.Valid:
		d.Verdict, d.OK = totals+"; the correct handler by none", true
	case chaos.Inconclusive:
		d.Verdict = totals + "; the correct handler by none, but its chaos runs never exercised some defence: INCONCLUSIVE"
	default:
		var why []string
		if caught < total {
			why = append(why, fmt.Sprintf("%d missed by every check", total-caught))
		}
		if rep.Clean.Any() {
			why = append(why, "the correct handler was caught (a false alarm)")
		}
		d.Verdict = totals + ": FAILED (" + strings.Join(why, "; ") + ")"
	}
	d.Style(auditCSS)
	d.Script(auditScript)

	var b strings.Builder
	b.WriteString(`<p class="legend">`)
	for _, s := range []string{CellCaught, CellMissed, CellInconclusive, CellClean, CellFalseAlarm} {
		l := cellLook[s]
		fmt.Fprintf(&b, `<span class="mk %s">%s</span> %s &nbsp; `, l.class, l.sym, s)
	}
	b.WriteString(`· Click a cell for its evidence.</p>`)
	b.WriteString(`<div class="matrix-wrap"><table class="matrix" id="matrix"><thead><tr><th scope="col">mistake</th>`)
	for i, c := range rep.Columns {
		fmt.Fprintf(&b, `<th scope="col" class="check" data-column="%s" title="check %d: %s"><span>%s</span></th>`, Esc(c), i+1, Esc(c), Esc(c))
	}
	b.WriteString(`<th scope="col">verdict</th></tr></thead>` + "\n")
	group := func(title string) {
		fmt.Fprintf(&b, `<tr class="group"><th colspan="%d" scope="rowgroup">%s</th></tr>`+"\n", len(rep.Columns)+2, Esc(title))
	}
	row := func(r chaos.AuditRow, correct bool) {
		verdict, vclass := "", ""
		n := 0
		for _, c := range rep.Columns {
			if r.Caught[c] {
				n++
			}
		}
		switch {
		case correct && n > 0:
			verdict, vclass = fmt.Sprintf("✗ FALSE ALARM (%d)", n), "bad"
		case correct:
			verdict, vclass = "✓ clean", "ok"
		case n > 0:
			verdict, vclass = fmt.Sprintf("✓ caught by %d", n), "ok"
		default:
			verdict, vclass = "✗ MISSED", "bad"
		}
		trClass := "mistake"
		if correct {
			trClass = "correct-row"
		} else if n == 0 {
			trClass = "mistake missed-row"
		}
		name := r.Bug
		if correct {
			name = "correct handler " + r.Bug
		}
		fmt.Fprintf(&b, `<tr class="%s" data-bug="%s"><th scope="row" class="row"><a href="#bug-%s">%s</a></th>`, trClass, Esc(r.Bug), Esc(anchor(r.Bug)), Esc(name))
		for _, c := range rep.Columns {
			state, ev := AuditCell(r, c, correct)
			l := cellLook[state]
			tip := r.Bug + " × " + c + ": " + state
			fmt.Fprintf(&b, `<td class="cell %s" data-state="%s" data-column="%s" title="%s">`, l.class, Esc(state), Esc(c), Esc(tip))
			fmt.Fprintf(&b, `<details><summary><span class="sym">%s</span><span class="word">%s</span></summary><div class="why">%s</div></details></td>`,
				l.sym, Esc(state), Esc(tip+"\n"+ev))
		}
		fmt.Fprintf(&b, `<td class="rowverdict %s">%s</td></tr>`+"\n", vclass, Esc(verdict))
	}
	b.WriteString(`<tbody class="correct">`)
	group("the correct handler: every check must pass it")
	row(rep.Clean, true)
	b.WriteString("</tbody>\n<tbody class=\"mistakes\">")
	group("the mistakes: each must be caught by at least one check")
	for _, r := range rep.Rows {
		row(r, false)
	}
	b.WriteString("</tbody>\n<tfoot><tr><th scope=\"row\">caught</th>")
	for _, c := range rep.Columns {
		n := 0
		for _, r := range rep.Rows {
			if r.Caught[c] {
				n++
			}
		}
		fmt.Fprintf(&b, `<td class="num" title="%s caught %d mistake(s)">%d</td>`, Esc(c), n, n)
	}
	fmt.Fprintf(&b, "<td id=\"totals\">%s</td></tr></tfoot></table></div>\n", Esc(totals))
	d.Section("matrix-section", "Mistakes × checks", template.HTML(b.String()))

	var notes strings.Builder
	if seeds := rep.Clean.Seeds; len(seeds) > 1 && !rep.Clean.Any() {
		s := make([]string, len(seeds))
		for i, x := range seeds {
			s[i] = fmt.Sprint(uint64(x))
		}
		fmt.Fprintf(&notes, "<p>The correct handler's chaos column took %d runs (seeds %s), whose coverage is judged together: a run that happened not to reach a rare path was followed by the next seed's.</p>",
			len(seeds), Esc(strings.Join(s, ", ")))
	}
	if len(rep.Clean.Missing) > 0 && !rep.Clean.Any() {
		notes.WriteString(`<p class="warn">? INCONCLUSIVE chaos column: the correct handler broke no rule, but its chaos runs together never exercised:</p><ul>`)
		for _, m := range rep.Clean.Missing {
			fmt.Fprintf(&notes, "<li>%s</li>", Esc(m))
		}
		notes.WriteString("</ul>")
	}
	notes.WriteString(`<dl class="mistakes">`)
	for _, r := range append([]chaos.AuditRow{rep.Clean}, rep.Rows...) {
		what := r.Mistake
		if r.Bug == rep.Clean.Bug {
			what = "the handler as it should be, with no mistake switched on"
		}
		first := ""
		for _, c := range rep.Columns {
			if why, ok := r.Why[c]; ok {
				first = c + ": " + why
				break
			}
		}
		fmt.Fprintf(&notes, `<dt id="bug-%s">%s</dt><dd>%s`, Esc(anchor(r.Bug)), Esc(r.Bug), Esc(what))
		if first != "" {
			fmt.Fprintf(&notes, `<br><small>first broke: %s</small>`, Esc(firstLineOf(first)))
		}
		notes.WriteString("</dd>")
	}
	notes.WriteString("</dl>")
	d.Section("mistakes", "The mistakes, and what first broke", template.HTML(notes.String()))
	return d
}

// anchor makes a name usable as an id: the correct handler's "(none)".
func anchor(name string) string {
	return strings.Trim(strings.Map(func(r rune) rune {
		if r == '(' || r == ')' || r == ' ' {
			return '-'
		}
		return r
	}, name), "-")
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if r := []rune(s); len(r) > 200 {
		s = string(r[:197]) + "…"
	}
	return s
}
