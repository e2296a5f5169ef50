package htmlreport

import (
	"fmt"
	"html/template"
	"strings"
)

// Compare is what 'bank-sim compare' shows, already worded by cmd (which
// owns how a story's events are told): a story's runs side by side, attempt
// by attempt, then the end, the invariants and what differed.
type Compare struct {
	Story, Title string
	Seed         uint64
	Passed       bool
	Verdict      string
	Duration     string
	// Runs are the columns: "without protection", "with protection".
	Runs []CompareRun
	Rows []CompareRow
	// LeftOut counts the set-up requests, alike in every run, that the
	// table leaves out.
	LeftOut int
	// End and Invariants hold one entry per run.
	End        [][]string
	Invariants []CompareInvariants
	Differed   []CompareDiff
}

// CompareRun is one run (phase) of the story.
type CompareRun struct {
	Name string
	// Control: the run without protection, expected to go wrong.
	Control bool
	Passed  bool
	Verdict string
}

// CompareRow is one attempt across the runs; a nil cell is an attempt that
// run did not make.
type CompareRow struct {
	Label string
	Cells [][]string
	// Differs: the runs told the client or moved money differently.
	Differs bool
}

// CompareInvariants is a run's invariants at the end.
type CompareInvariants struct {
	Held  bool
	Words string
}

// CompareDiff is what differed between a protected run and a control.
type CompareDiff struct {
	Protected, Control string
	Items              []CompareDiffItem
}

// CompareDiffItem is one difference; Sub are its details.
type CompareDiffItem struct {
	Text  string
	Sub   []string
	Plain bool
}

const compareCSS = `
table.compare { width: 100%; table-layout: fixed; }
table.compare th.label { width: 11rem; }
table.compare td p { margin: 0; }
table.compare td p + p { color: var(--muted); font-size: .9rem; }
table.compare tr.differs th.label::after { content: " ≠"; color: var(--bad); font-weight: 700; }
table.compare tr.differs td { background: #fff8e6; }
table.compare td.absent { color: var(--muted); }
table.compare th.run small { display: block; font-weight: 400; color: var(--muted); }
table.compare tbody.end { border-top: 3px double var(--ink); }
ul.differed li { margin: .3rem 0; }
ul.differed ul { color: var(--muted); }
@media print { table.compare tr.differs td { background: none; } table.compare tr.differs td { font-weight: 600; } }
`

// CompareDoc renders a compare as a report: the runs as columns, so the
// same attempt reads across; rows that differ marked (≠ and shaded).
func CompareDoc(c Compare) *Doc {
	d := &Doc{Kind: "compare", Title: fmt.Sprintf("compare %s · %s", c.Story, c.Title),
		Subtitle: fmt.Sprintf("seed %d (repeat with --seed %d) · %s", c.Seed, c.Seed, c.Duration),
		Verdict:  c.Verdict, OK: c.Passed}
	d.Style(compareCSS)
	var b strings.Builder
	b.WriteString(`<table class="compare" id="runs"><thead><tr><th class="label" scope="col">attempt</th>`)
	for _, r := range c.Runs {
		role := "protected"
		if r.Control {
			role = "control: expected to go wrong"
		}
		fmt.Fprintf(&b, `<th class="run" scope="col" data-control="%t">%s<small>%s</small></th>`, r.Control, Esc(r.Name), Esc(role))
	}
	b.WriteString("</tr></thead>\n<tbody>\n")
	for _, r := range c.Rows {
		cls := ""
		if r.Differs {
			cls = ` class="differs" title="the runs differ here"`
		}
		fmt.Fprintf(&b, `<tr%s><th class="label" scope="row">%s</th>`, cls, Esc(r.Label))
		for _, cell := range r.Cells {
			if cell == nil {
				b.WriteString(`<td class="absent">—</td>`)
				continue
			}
			b.WriteString("<td>")
			for _, l := range cell {
				fmt.Fprintf(&b, "<p>%s</p>", Esc(l))
			}
			b.WriteString("</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</tbody>\n<tbody class=\"end\">\n<tr><th class=\"label\" scope=\"row\">in the end</th>")
	for _, e := range c.End {
		b.WriteString("<td>")
		for _, l := range e {
			fmt.Fprintf(&b, "<p>%s</p>", Esc(l))
		}
		b.WriteString("</td>")
	}
	b.WriteString("</tr>\n<tr><th class=\"label\" scope=\"row\">invariants</th>")
	for _, inv := range c.Invariants {
		fmt.Fprintf(&b, "<td>%s</td>", Mark(inv.Held, inv.Words))
	}
	b.WriteString("</tr>\n</tbody></table>\n")
	if c.LeftOut > 0 {
		noun := "requests"
		if c.LeftOut == 1 {
			noun = "request"
		}
		fmt.Fprintf(&b, `<p class="sub">%d %s that only set the story up, the same in every run, left out. ≠ marks an attempt the runs told or paid differently.</p>`, c.LeftOut, noun)
	} else {
		b.WriteString(`<p class="sub">≠ marks an attempt the runs told or paid differently.</p>`)
	}
	d.Section("runs-section", "The runs side by side", template.HTML(b.String()))

	var w strings.Builder
	for _, g := range c.Differed {
		if len(c.Differed) > 1 {
			fmt.Fprintf(&w, "<h3>%s, against %s</h3>", Esc(g.Protected), Esc(g.Control))
		}
		w.WriteString(`<ul class="differed">`)
		for _, it := range g.Items {
			if it.Plain {
				fmt.Fprintf(&w, "<li class=\"plain\">%s</li>", Esc(it.Text))
				continue
			}
			fmt.Fprintf(&w, "<li>%s", Esc(it.Text))
			if len(it.Sub) > 0 {
				w.WriteString("<ul>")
				for _, s := range it.Sub {
					fmt.Fprintf(&w, "<li>%s</li>", Esc(s))
				}
				w.WriteString("</ul>")
			}
			w.WriteString("</li>")
		}
		w.WriteString("</ul>")
	}
	d.Section("differed", "What differed", template.HTML(w.String()))

	var v strings.Builder
	for _, r := range c.Runs {
		fmt.Fprintf(&v, "<p>%s <strong>%s</strong>: %s</p>", Mark(r.Passed, map[bool]string{true: "as expected", false: "not as expected"}[r.Passed]), Esc(r.Name), Esc(r.Verdict))
	}
	d.Section("verdicts", "Each run's verdict", template.HTML(v.String()))
	return d
}
