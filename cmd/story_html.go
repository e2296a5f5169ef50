package cmd

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/scenarios"
)

// scenario --html: the stories as one self-contained page. The drawing is
// internal/htmlreport's; what a story's events mean — which lanes, which
// pieces of a request join into one arrow, people's names for intents — is
// the same model --timeline and --format mermaid draw from (items, lanesOf,
// humanizer), which lives here in cmd, so the page is built here too.

// sequenceOf is a phase's picture: the terminal timeline's items, as a
// Sequence for SVG.
func sequenceOf(title string, its []item) htmlreport.Sequence {
	q := htmlreport.Sequence{Label: "sequence diagram: " + title}
	for _, l := range lanesOf(its) {
		q.Lanes = append(q.Lanes, htmlreport.SeqLane{ID: l, Name: laneName(l)})
	}
	for _, it := range its {
		r := htmlreport.SeqRow{Label: it.label, When: it.when, Events: it.events}
		switch it.kind {
		case "arrow":
			r.Kind, r.From, r.To = htmlreport.SeqRequest, it.from, it.to
			if it.answer {
				r.Kind = htmlreport.SeqAnswer
			}
		case "fault":
			r.Kind, r.Lane = htmlreport.SeqFault, it.lane
		case "note":
			r.Kind, r.Lane = htmlreport.SeqNote, it.lane
		case "step":
			r.Kind = htmlreport.SeqStep
		default:
			r.Kind = htmlreport.SeqText
		}
		q.Rows = append(q.Rows, r)
	}
	return q
}

// laneName is how a lane is labelled in a picture: a person's lane is
// their app.
func laneName(l string) string {
	if isClient(l) && l != "client" {
		return l + "'s app"
	}
	return l
}

// storyDoc is the HTML report of a scenario run: one story, or (for more)
// a summary table linking to each.
func storyDoc(reports []scenarios.Report, seed uint64, bug *mistakes.Bug, changed []string, interrupted bool) *htmlreport.Doc {
	d := &htmlreport.Doc{Kind: "story"}
	passed, failed := tally(reports)
	sub := fmt.Sprintf("seed %d (repeat this run with --seed %d)", seed, seed)
	if bug != nil {
		sub += " · bug " + bug.Name + " on in every protected phase: " + bug.Mistake
	}
	if len(changed) > 0 {
		sub += " · changed run: " + strings.Join(changed, ", ") + " (the invariants alone judge)"
	}
	if interrupted {
		sub += " · interrupted: only the stories that finished are here"
	}
	d.Subtitle = sub
	d.Style(htmlreport.SequenceCSS)
	d.Style(storyCSS)
	if len(reports) == 1 {
		r := reports[0]
		d.Title = r.Scenario + " · " + r.Title
		d.Verdict, d.OK = storyVerdict(r), r.Passed
		d.Section(r.Scenario, "The story", storyBody(r, false))
		return d
	}
	d.Kind = "stories"
	d.Title = "bank-sim stories"
	d.Verdict, d.OK = fmt.Sprintf("%d passed, %d failed", passed, failed), failed == 0
	t := htmlreport.Table{ID: "summary-table", Head: []string{"story", "title", "verdict", "phases", "time"}}
	for _, r := range reports {
		word := "PASS"
		if !r.Passed {
			word = "FAIL"
		}
		t.Rows = append(t.Rows, []htmlreport.Cell{
			{Text: r.Scenario, Href: "#" + r.Scenario},
			htmlreport.C(r.Title),
			{HTML: htmlreport.Mark(r.Passed, word), Title: shortIDs(r.Verdict), Class: okWord(r.Passed)},
			{Text: fmt.Sprint(len(r.Phases)), Class: "num"},
			{Text: humanDuration(r.Duration), Class: "num"},
		})
		t.RowIDs = append(t.RowIDs, "row-"+r.Scenario)
	}
	d.Section("summary", "Summary", t.HTML())
	for _, r := range reports {
		d.Section(r.Scenario, r.Scenario+" · "+r.Title, storyBody(r, true))
	}
	return d
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "bad"
}

func storyVerdict(r scenarios.Report) string {
	if r.Passed {
		return "PASS: " + shortIDs(r.Verdict)
	}
	return "FAIL: " + shortIDs(r.Verdict)
}

// storyBody is one story: its summary, then each phase's picture, balances,
// invariants and expectations; withVerdict adds the story's verdict (the
// page's own verdict is the run's when it holds many stories).
func storyBody(r scenarios.Report, withVerdict bool) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<div class="story" data-story="%s" data-passed="%t">`, htmlreport.Esc(r.Scenario), r.Passed)
	b.WriteString(string(htmlreport.Para(r.Summary)))
	if withVerdict {
		fmt.Fprintf(&b, `<p class="storyverdict">%s</p>`, htmlreport.Mark(r.Passed, storyVerdict(r)))
	}
	for _, c := range r.Changes {
		if c.Fired != nil && *c.Fired == 0 {
			fmt.Fprintf(&b, `<p class="warn">! %s never struck</p>`, htmlreport.Esc(c.What))
		}
	}
	for i, p := range r.Phases {
		b.WriteString(string(phaseHTML(r.Scenario, i, len(r.Phases), p)))
	}
	b.WriteString("</div>")
	return template.HTML(b.String())
}

// phaseHTML is one phase: its picture, balances before and after, the
// invariants with their verdicts, and the story's own expectations.
func phaseHTML(story string, i, n int, p scenarios.PhaseReport) template.HTML {
	h := newHumanizer(p.Labels)
	var b strings.Builder
	kind := "with protection: every invariant must hold"
	if p.Control {
		kind = "control: without protection the fault must break an invariant"
	}
	fmt.Fprintf(&b, `<div class="phase" id="%s-phase-%d" data-phase="%d" data-control="%t" data-passed="%t">`,
		htmlreport.Esc(story), i+1, i+1, p.Control, p.Passed)
	fmt.Fprintf(&b, `<h3>%d/%d · %s</h3><p class="kind">%s</p>`, i+1, n, htmlreport.Esc(p.Title), htmlreport.Esc(kind))
	fmt.Fprintf(&b, `<p class="phaseverdict %s">%s</p>`, phaseClass(p), htmlreport.Esc(phaseVerdict(p, h)))
	b.WriteString(string(sequenceOf(p.Title, items(p, h)).SVG()))
	id := fmt.Sprintf("%s-phase-%d-", story, i+1)
	b.WriteString(string(balancesTable(p, id+"balances")))
	b.WriteString(string(invariantsTable(p, h, id+"invariants")))
	if len(p.Expectations) > 0 {
		t := htmlreport.Table{ID: id + "expectations", Caption: "The story's own checks", Head: []string{"expected", "whose", "verdict"}}
		for _, e := range p.Expectations {
			whose := "bank-sim's own"
			if e.Source == scenarios.SourceLesson {
				whose = "the lesson's"
			}
			t.Rows = append(t.Rows, []htmlreport.Cell{htmlreport.C(h.text(e.Text)), htmlreport.C(whose),
				{HTML: htmlreport.Mark(e.OK, map[bool]string{true: "as expected", false: "did not happen"}[e.OK]), Class: okWord(e.OK) + " v"}})
		}
		b.WriteString(string(t.HTML()))
	}
	if p.Error != "" {
		fmt.Fprintf(&b, `<p class="bad">error: %s</p>`, htmlreport.Esc(h.text(p.Error)))
	}
	b.WriteString("</div>")
	return template.HTML(b.String())
}

// phaseVerdict is the phase's last line, as the story prints it.
func phaseVerdict(p scenarios.PhaseReport, h humanizer) string {
	var broken []string
	for _, c := range p.Invariants {
		if !c.OK {
			broken = append(broken, c.Name+" — "+fewCases(h.text(c.Detail), ""))
		}
	}
	switch {
	case !p.Passed:
		return "✗ FAILED: " + h.text(p.Verdict)
	case p.Control && len(broken) == 0:
		return "· without protection, nothing broke this time"
	case p.Control:
		return "⇒ what goes wrong: " + strings.Join(broken, "; and: ")
	}
	return fmt.Sprintf("✓ all %d invariants hold", len(p.Invariants))
}

func phaseClass(p scenarios.PhaseReport) string {
	switch {
	case !p.Passed:
		return "bad"
	case p.Control:
		return "warn"
	}
	return "ok"
}

// balancesTable is each account before the phase (the lesson's bank, which
// every phase starts from) and after it.
func balancesTable(p scenarios.PhaseReport, id string) template.HTML {
	t := htmlreport.Table{ID: id, Caption: "Balances: the lesson's bank before, the ledger after — " + p.Balances,
		Head: []string{"account", "status", "before", "after", "change"}}
	before := map[int64]bank.Account{}
	var totalBefore int64
	for _, a := range bank.LessonAccounts {
		before[a.ID] = a
		totalBefore += a.BalanceKobo
	}
	var totalAfter int64
	for _, a := range p.Ledger.Accounts {
		was := before[a.ID].BalanceKobo
		totalAfter += a.BalanceKobo
		t.Rows = append(t.Rows, []htmlreport.Cell{
			htmlreport.C(a.Holder), htmlreport.C(a.Status),
			{Text: bank.Naira(was), Class: "num"},
			{Text: bank.Naira(a.BalanceKobo), Class: "num after"},
			{Text: signedNaira(a.BalanceKobo - was), Class: "num"},
		})
		t.RowIDs = append(t.RowIDs, "")
	}
	totalOK := totalAfter == totalBefore
	t.Rows = append(t.Rows, []htmlreport.Cell{htmlreport.C("total"), htmlreport.C(""),
		{Text: bank.Naira(totalBefore), Class: "num"}, {Text: bank.Naira(totalAfter), Class: "num after"},
		{HTML: htmlreport.Mark(totalOK, signedNaira(totalAfter-totalBefore)), Class: "num " + okWord(totalOK)}})
	return t.HTML()
}

func signedNaira(k int64) string {
	switch {
	case k > 0:
		return "+" + bank.Naira(k)
	case k < 0:
		return "−" + bank.Naira(-k)
	}
	return "0"
}

// invariantsTable is every invariant with its verdict. A broken one in a
// control is the phase's point, and says so; in a protected phase it is a
// failure.
func invariantsTable(p scenarios.PhaseReport, h humanizer, id string) template.HTML {
	t := htmlreport.Table{ID: id, Caption: "Invariants", Head: []string{"invariant", "verdict", "what was found"}}
	for _, c := range p.Invariants {
		var v htmlreport.Cell
		switch {
		case c.OK:
			v = htmlreport.Cell{HTML: htmlreport.Mark(true, "holds"), Class: "ok v"}
		case p.Control && p.Passed:
			v = htmlreport.Cell{HTML: template.HTML(`<span class="mark warn">⇒ broken, as this phase sets out to show</span>`), Class: "warn v broken"}
		default:
			v = htmlreport.Cell{HTML: htmlreport.Mark(false, "BROKEN"), Class: "bad v broken"}
		}
		t.Rows = append(t.Rows, []htmlreport.Cell{htmlreport.C(c.Name), v, htmlreport.C(fewCases(h.text(c.Detail), ""))})
	}
	return t.HTML()
}

const storyCSS = `
.phase { margin: 1.2rem 0 2rem; }
.phase h3 { margin-bottom: 0; }
.phase .kind { color: var(--muted); margin: 0 0 .3rem; }
.phaseverdict { font-weight: 700; padding: .3rem .6rem; border-left: 5px solid; background: var(--soft); }
.phaseverdict.ok { color: var(--ok); } .phaseverdict.bad { color: var(--bad); } .phaseverdict.warn { color: var(--warn); }
.storyverdict { font-weight: 700; }
.mark.warn { color: var(--warn); }
@media print { .phase { break-inside: avoid-page; } }
`
