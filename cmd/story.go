package cmd

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/scenarios"
)

// storyObserver prints a scenario as it happens. In story mode (the
// default) it prints what the lesson's scripts print — per phase the steps,
// the answers the clients got, the balances line once — and the verdict: the
// invariant that broke in a control, "all invariants hold" in a protected
// run. Every check still runs; --verbose prints each of them, and the
// server's side.
type storyObserver struct {
	out     io.Writer
	p       *palette
	verbose bool
	width   int    // wrap at this many columns; 0: never
	pace    *pacer // --step and --pace; nil: neither
	changed []string

	mu       sync.Mutex
	s        scenarios.Scenario
	started  bool // the scenario's header is out
	phase    scenarios.Phase
	index    int
	inPhase  bool // the phase's header is out
	human    humanizer
	lastStep string
	printed  bool // something was printed since the last pause
}

func (t *storyObserver) ScenarioStart(s scenarios.Scenario, seed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s, t.started = s, false
}

// header prints the scenario's header, once, when it has something to say:
// an interrupted run prints no empty headers.
func (t *storyObserver) header() {
	if t.started {
		return
	}
	t.started = true
	title := t.p.head.Sprint("━━ " + t.s.Name)
	if t.s.Title != "" && t.s.Title != t.s.Name {
		title += t.p.head.Sprint(" · " + t.s.Title)
	}
	fmt.Fprintf(t.out, "\n%s\n", title)
	if t.verbose {
		t.wrapped("   ", "", t.s.Summary, t.p.dim)
		switch groupOf(t.s) {
		case groupLesson:
			t.wrapped("   ", "", "from the lesson: "+t.s.Lesson, t.p.dim)
		case groupArticle:
			t.wrapped("   ", "", "from the article “"+scenarios.ArticleTitle+"”, "+t.s.Article+" (not in the lesson)", t.p.dim)
		default:
			t.wrapped("   ", "", "a story of bank-sim's own (not in the lesson)", t.p.dim)
		}
	}
	if len(t.changed) > 0 {
		t.wrapped("   ", "", "changed run: "+strings.Join(t.changed, ", ")+". The story's own checks are shown, but the invariants alone judge.", t.p.warn)
	}
}

func (t *storyObserver) PhaseStart(p scenarios.Phase, i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phase, t.index, t.inPhase, t.lastStep = p, i, false, ""
	t.human = humanizer{}
}

func (t *storyObserver) phaseHeader() {
	t.header()
	if t.inPhase {
		return
	}
	t.inPhase = true
	mark := t.p.ok.Sprint("▸")
	if t.phase.Control {
		mark = t.p.warn.Sprint("▸")
	}
	n := fmt.Sprintf("%d/%d ", t.index+1, len(t.s.Phases))
	lines := wrap(t.phase.Title, t.wrapWidth(2+width(n)))
	fmt.Fprintf(t.out, "%s %s%s\n", mark, t.p.dim.Sprint(n), t.p.bold.Sprint(lines[0]))
	for _, l := range lines[1:] {
		fmt.Fprintf(t.out, "%s%s\n", strings.Repeat(" ", 2+width(n)), t.p.bold.Sprint(l))
	}
	t.line()
}

func (t *storyObserver) wrapWidth(indent int) int {
	if t.width <= 0 {
		return 0
	}
	return max(t.width-indent, 20)
}

// wrapped prints text after indent and mark, wrapped to the width, its
// continuation lines indented under the text. mark is measured as plain
// text; marked is its coloured form.
func (t *storyObserver) wrapped(indent, marked string, text string, style colorer) {
	mark := ansi.ReplaceAllString(marked, "")
	lead := width(indent)
	if mark != "" {
		lead += width(mark) + 1
	}
	for i, l := range wrap(text, t.wrapWidth(lead)) {
		prefix := indent
		switch {
		case mark != "" && i == 0:
			prefix += marked + " "
		case mark != "":
			prefix += strings.Repeat(" ", width(mark)+1)
		}
		fmt.Fprintf(t.out, "%s%s\n", prefix, style.Sprint(l))
	}
	t.line()
}

// ansi matches colour codes, which take no columns.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

func (t *storyObserver) line() {
	t.printed = true
	if t.pace != nil {
		t.pace.line()
	}
}

// pause waits for the instructor, if anything was printed since last time.
func (t *storyObserver) pause() {
	if t.pace == nil || !t.printed {
		return
	}
	t.printed = false
	t.pace.pause()
}

func (t *storyObserver) Event(e scenarios.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	text := t.human.text(e.Text)
	switch e.Kind {
	case scenarios.KindStep:
		// Each step waits for the instructor (after the phase's header, or
		// after the last step's answers); a loop of identical steps
		// advances as one.
		if text != t.lastStep {
			t.phaseHeader()
			t.pause()
		}
		t.lastStep = text
		t.phaseHeader()
		t.wrapped("   ", "", text, plain{})
	case scenarios.KindAttempt:
		if e.Setup && !t.verbose {
			return
		}
		t.phaseHeader()
		t.wrapped("   ", "", text, plain{})
	case scenarios.KindBalances:
		t.phaseHeader()
		t.wrapped("   ", "", text, t.p.bold)
	case scenarios.KindExpect:
		t.expectation(e, text)
	case scenarios.KindServer, scenarios.KindFault, scenarios.KindDatabase:
		if !t.verbose {
			return
		}
		t.phaseHeader()
		t.wrapped("     ", "", sideText(e, text), t.p.dim)
	}
}

// sideText is a server-side event as --verbose tells it.
func sideText(e scenarios.Event, text string) string {
	switch e.Kind {
	case scenarios.KindFault:
		return fmt.Sprintf("✕ %s (%s): %s", e.Fault, e.Lane, text)
	case scenarios.KindDatabase:
		return fmt.Sprintf("%s → database: %s", e.From, text)
	}
	lane := e.Lane
	if lane == "" {
		lane = "server"
	}
	return lane + ": " + text
}

func (t *storyObserver) expectation(e scenarios.Event, text string) {
	ok := e.OK != nil && *e.OK
	switch {
	case ok && !t.verbose:
		return
	case ok:
		t.phaseHeader()
		t.wrapped("   ", t.p.ok.Sprint("✓"), sourceLabel(e.Source)+text, t.p.dim)
	case len(t.changed) > 0:
		// In a live experiment the story's numbers need not hold.
		t.phaseHeader()
		t.wrapped("   ", t.p.warn.Sprint("≠"), "not as in the story: "+text, plain{})
	default:
		t.phaseHeader()
		t.wrapped("   ", t.p.bad.Sprint("✗"), "expected "+text+", but it did not happen", t.p.bad)
	}
}

func sourceLabel(source string) string {
	if source == scenarios.SourceLesson {
		return "as the lesson says: "
	}
	return "bank-sim checks: "
}

func (t *storyObserver) PhaseEnd(r scenarios.PhaseReport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.human = newHumanizer(r.Labels)
	t.phaseHeader()
	if t.verbose {
		for _, c := range r.Invariants {
			detail := t.human.text(c.Detail)
			switch {
			case c.OK:
				t.wrapped("   ", t.p.ok.Sprint("✓"), c.Name+": "+detail, t.p.dim)
			case r.Control && r.Passed:
				t.wrapped("   ", t.p.warn.Sprint("⇒"), c.Name+": "+detail+" (broken, as this run sets out to show)", plain{})
			default:
				t.wrapped("   ", t.p.bad.Sprint("✗"), c.Name+": "+detail, t.p.bad)
			}
		}
	}
	if r.Error != "" {
		t.wrapped("   ", t.p.bad.Sprint("error:"), t.human.text(r.Error), plain{})
	}
	t.verdict(r)
	t.pause()
}

// verdict is the phase's last line: what broke in a control (the point of
// the story, not a failure), or that every invariant held.
func (t *storyObserver) verdict(r scenarios.PhaseReport) {
	var broken []bank.Check
	for _, c := range r.Invariants {
		if !c.OK {
			broken = append(broken, c)
		}
	}
	switch {
	case !r.Passed:
		t.wrapped("   ", t.p.bad.Sprint("✗"), "FAILED: "+t.human.text(r.Verdict), t.p.bad)
		if !t.verbose {
			for _, c := range broken {
				t.wrapped("     ", "", c.Name+": "+t.human.text(c.Detail), t.p.bad)
			}
		}
	case r.Control && len(broken) == 0:
		t.wrapped("   ", t.p.warn.Sprint("·"), "without protection, nothing broke this time", t.p.warn)
	case r.Control && t.verbose:
		t.wrapped("   ", t.p.warn.Sprint("⇒"), t.human.text(r.Verdict), t.p.warn)
	case r.Control:
		// Each broken invariant with what it caught; a check joins the
		// cases it caught with "; ": one a line.
		for i, c := range broken {
			lead := "what goes wrong: "
			if i > 0 {
				lead = "and: "
			}
			parts := strings.Split(fewCases(t.human.text(c.Detail), " (--verbose lists them)"), "; ")
			t.wrapped("   ", t.p.warn.Sprint("⇒"), lead+c.Name+" — "+parts[0], t.p.warn)
			for _, more := range parts[1:] {
				t.wrapped("     ", "", more, t.p.warn)
			}
		}
	default:
		text := fmt.Sprintf("all %d invariants hold", len(r.Invariants))
		if n := countBy(r.Expectations); n != "" && !t.verbose {
			text += "; " + n
		}
		t.wrapped("   ", t.p.ok.Sprint("✓"), text, t.p.ok)
	}
}

// maxCases is how many cases of one broken invariant a story's verdict
// and compare show: a few make the point; --verbose lists every one.
const maxCases = 3

// fewCases is an invariant's detail, whose cases are joined with "; ",
// cut to maxCases; hint follows the count of those left out.
func fewCases(detail, hint string) string {
	parts := strings.Split(detail, "; ")
	if len(parts) <= maxCases {
		return detail
	}
	parts = append(parts[:maxCases-1], fmt.Sprintf("and %d more like these%s", len(parts)-maxCases+1, hint))
	return strings.Join(parts, "; ")
}

// countBy says how many of the story's own expectations were checked, and
// whose: "5 checks as the lesson says, 1 of bank-sim's own".
func countBy(es []scenarios.Expectation) string {
	lesson, own := 0, 0
	for _, e := range es {
		if e.Source == scenarios.SourceLesson {
			lesson++
		} else {
			own++
		}
	}
	var parts []string
	if lesson > 0 {
		parts = append(parts, fmt.Sprintf("%s as the lesson says", countOf(lesson, "check", "checks")))
	}
	if own > 0 {
		if lesson > 0 {
			parts = append(parts, fmt.Sprintf("%d of bank-sim's own", own))
		} else {
			parts = append(parts, fmt.Sprintf("%s of bank-sim's own", countOf(own, "check", "checks")))
		}
	}
	return strings.Join(parts, ", ")
}

func (t *storyObserver) ScenarioEnd(r scenarios.Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.header()
	d := t.p.dim.Sprintf("(%s)", humanDuration(r.Duration))
	switch {
	case !r.Passed:
		fmt.Fprintf(t.out, "%s %s %s\n", t.p.bad.Sprint("FAIL"), r.Scenario, d)
	case r.Changed():
		fmt.Fprintf(t.out, "%s %s %s %s\n", t.p.ok.Sprint("PASS"), r.Scenario, d, t.p.warn.Sprint("(changed run)"))
	default:
		fmt.Fprintf(t.out, "%s %s %s\n", t.p.ok.Sprint("PASS"), r.Scenario, d)
	}
	for _, c := range r.Changes {
		if c.Fired != nil && *c.Fired == 0 {
			t.wrapped("   ", t.p.warn.Sprint("!"), c.What+" never struck: "+neverStruck(t.s, c.What), t.p.warn)
		}
	}
}

// neverStruck explains why an experiment's fault did not fire.
func neverStruck(s scenarios.Scenario, what string) string {
	return "this story has no request on those attempts that such a fault can reach (in-process faults strike the stories without HTTP; connection faults those over HTTP; see 'bank-sim explain " + s.Name + "')"
}

// countOf spells a count with its noun: "1 check", "5 checks".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// colorer is a palette colour, or plain.
type colorer interface {
	Sprint(a ...any) string
}

type plain struct{}

func (plain) Sprint(a ...any) string { return fmt.Sprint(a...) }

// summary is the last line of a run: how many passed.
func summary(out io.Writer, p *palette, reports []scenarios.Report, elapsed time.Duration) {
	passed, failed := tally(reports)
	fmt.Fprintln(out)
	for _, r := range reports {
		if !r.Passed {
			fmt.Fprintf(out, "%s %s: %s\n", p.bad.Sprint("FAIL"), r.Scenario, shortIDs(r.Verdict))
		}
	}
	line := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if failed > 0 {
		line = p.bad.Sprint(line)
	} else {
		line = p.ok.Sprint(line)
	}
	fmt.Fprintf(out, "%s %s\n", line, p.dim.Sprintf("in %s", humanDuration(elapsed)))
}

func tally(reports []scenarios.Report) (passed, failed int) {
	for _, r := range reports {
		if r.Passed {
			passed++
		} else {
			failed++
		}
	}
	return passed, failed
}
