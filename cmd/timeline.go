package cmd

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/scenarios"
)

// A picture of one phase: a sequence diagram with a lane for each client,
// the network, each server and the database, one row per event, faults
// marked where they strike. It is drawn from the phase's events when the
// phase ends, in the terminal (--timeline) or as Mermaid (--format mermaid).

// item is one row-worthy thing of a phase: an arrow between two lanes, a
// note at a lane, or narration across the whole diagram.
type item struct {
	kind     string // "arrow", "note", "fault", "text", "step"
	from, to string // arrow
	lane     string // note, fault
	label    string
	answer   bool // an arrow that carries an answer
	delivery int
	when     string // the time to show in the margin
	events   int    // how many of the phase's events the item stands for
}

// items turns a phase's events into diagram items, joining the pieces of a
// request that crossed the network untouched into one arrow.
func items(r scenarios.PhaseReport, h humanizer) []item {
	var out []item
	var start time.Duration
	if len(r.Events) > 0 {
		start = r.Events[0].Elapsed
	}
	for _, e := range r.Events {
		when := e.Clock
		if when == "" {
			when = humanDuration(e.Elapsed - start)
		}
		text := h.text(e.Text)
		it := item{label: text, delivery: e.Delivery, when: when, events: 1}
		switch e.Kind {
		case scenarios.KindStep:
			it.kind = "step"
		case scenarios.KindSend, scenarios.KindArrive, scenarios.KindAnswer, scenarios.KindAttempt, scenarios.KindDatabase:
			if e.From == "" || e.To == "" {
				it.kind = "text"
				break
			}
			it.kind, it.from, it.to = "arrow", e.From, e.To
			it.answer = e.Kind == scenarios.KindAnswer || e.Kind == scenarios.KindAttempt
		case scenarios.KindFault:
			it.kind, it.lane = "fault", e.Lane
			it.label = text + " (" + e.Fault + ")"
		case scenarios.KindServer:
			it.kind, it.lane = "note", e.Lane
			if it.lane == "" {
				it.lane = "server"
			}
		default:
			continue
		}
		out = append(out, it)
	}
	out = collapseSetup(out, setupDeliveries(r.Events))
	// Join client → network → server, and server → network → client, when
	// nothing happened on the network in between.
	var joined []item
	for i := 0; i < len(out); i++ {
		a := out[i]
		if i+1 < len(out) {
			b := out[i+1]
			if a.kind == "arrow" && b.kind == "arrow" && a.delivery != 0 && a.delivery == b.delivery &&
				a.to == "network" && b.from == "network" && a.answer == b.answer {
				a.to = b.to
				a.events += b.events
				if a.answer {
					a.label = b.label // the client's view of the answer
				}
				joined = append(joined, a)
				i++
				continue
			}
		}
		joined = append(joined, a)
	}
	return joined
}

// setupDeliveries are the requests that only set the story up
// (Run.SendSetup).
func setupDeliveries(events []scenarios.Event) map[int]bool {
	setup := map[int]bool{}
	for _, e := range events {
		if e.Kind == scenarios.KindAttempt && e.Setup && e.Delivery != 0 {
			setup[e.Delivery] = true
		}
	}
	return setup
}

// collapseSetup draws a run of three or more requests that only set the
// story up (six transfers to fill an outbox) as its first request and one
// line for the rest: their pictures are alike, and not the story's point.
func collapseSetup(its []item, setup map[int]bool) []item {
	var out []item
	for i := 0; i < len(its); {
		if its[i].delivery == 0 || !setup[its[i].delivery] {
			out = append(out, its[i])
			i++
			continue
		}
		j, n := i, 0
		for ; j < len(its) && its[j].delivery != 0 && setup[its[j].delivery]; j++ {
			if j == i || its[j].delivery != its[j-1].delivery {
				n++
			}
		}
		if n < 3 {
			out = append(out, its[i:j]...)
			i = j
			continue
		}
		k := i
		for ; k < j && its[k].delivery == its[i].delivery; k++ {
			out = append(out, its[k])
		}
		hidden := 0
		for _, it := range its[k:j] {
			hidden += it.events
		}
		out = append(out, item{kind: "text", when: its[j-1].when, events: hidden,
			label: fmt.Sprintf("… %d more requests like it (--verbose shows each)", n-1)})
		i = j
	}
	return out
}

// lanesOf orders the lanes: clients, the network, servers, the database.
func lanesOf(its []item) []string {
	var clients, servers []string
	network, database := false, false
	add := func(name string) {
		switch {
		case name == "network":
			network = true
		case name == "database":
			database = true
		case slices.Contains(clients, name) || slices.Contains(servers, name):
		case isClient(name):
			clients = append(clients, name)
		default:
			servers = append(servers, name)
		}
	}
	for _, it := range its {
		for _, n := range []string{it.from, it.to, it.lane} {
			if n != "" {
				add(n)
			}
		}
	}
	lanes := clients
	// Every request crosses the network, faulty or not: its lane is drawn
	// whenever clients talk to servers.
	if network || (len(clients) > 0 && len(servers) > 0) {
		lanes = append(lanes, "network")
	}
	lanes = append(lanes, servers...)
	if database {
		lanes = append(lanes, "database")
	}
	return lanes
}

// isClient tells a client's lane (a user's name) from a server's.
func isClient(name string) bool {
	switch name {
	case "Ada", "Bola", "Chidi", "client":
		return true
	}
	return strings.HasPrefix(name, "user ")
}

// cell styles
const (
	stBlank = iota
	stLife
	stArrow
	stAnswer
	stFault
	stNote
	stStep
	stTime
)

type cell struct {
	r  rune
	st int
}

type diagram struct {
	width, margin int
	lanes         []string
	x             map[string]int
	rows          [][]cell
	p             *palette
}

func newDiagram(lanes []string, w int, p *palette) *diagram {
	d := &diagram{width: w, margin: 8, lanes: lanes, x: map[string]int{}, p: p}
	n := max(len(lanes), 1)
	step := (w - d.margin) / n
	for i, l := range lanes {
		d.x[l] = d.margin + step*i + step/2
	}
	return d
}

func (d *diagram) blank() []cell {
	row := make([]cell, d.width)
	for i := range row {
		row[i] = cell{' ', stBlank}
	}
	for _, l := range d.lanes {
		row[d.x[l]] = cell{'│', stLife}
	}
	return row
}

func (d *diagram) put(row []cell, at int, s string, st int) {
	for _, r := range s {
		if at >= 0 && at < len(row) {
			row[at] = cell{r, st}
		}
		at++
	}
}

// stamp writes an item's time in the margin of its first row: every item
// has one, so that a diagram's shape never depends on how fast it ran.
func (d *diagram) stamp(row []cell, when string) {
	if when == "" {
		return
	}
	d.put(row, 0, pad(truncate(when, d.margin-1), d.margin-1), stTime)
}

// text places s on rows of its own, near column at: to its right if it
// fits, else as far right as it fits; wrapped when wider than the diagram.
func (d *diagram) text(s string, at int, st int, when string) {
	room := d.width - d.margin
	// Wrapped where it starts, if there is room enough there; else moved
	// left as far as it needs.
	if right := d.width - at; right >= 24 {
		room = right
	}
	for i, line := range wrap(s, room) {
		row := d.blank()
		if st == stStep {
			// Narration crosses the diagram: no lifelines beside it.
			for c := range row {
				row[c] = cell{' ', stBlank}
			}
		}
		if i == 0 {
			d.stamp(row, when)
		}
		start := min(at, d.width-width(line))
		d.put(row, max(start, d.margin), line, st)
		d.rows = append(d.rows, row)
	}
}

func (d *diagram) header() {
	row := d.blank()
	for _, l := range d.lanes {
		name := l
		if isClient(l) && l != "client" {
			name = l + "'s app"
		}
		step := d.width - d.margin
		if len(d.lanes) > 0 {
			step /= len(d.lanes)
		}
		name = truncate(name, step-1)
		d.put(row, d.x[l]-width(name)/2, name, stStep)
	}
	d.rows = append(d.rows, row, d.blank())
}

func (d *diagram) arrow(it item) {
	xa, xb := d.x[it.from], d.x[it.to]
	st := stArrow
	if it.answer {
		st = stAnswer
	}
	lo, hi := min(xa, xb), max(xa, xb)
	label := it.label
	inline := hi-lo-5 >= width(label)
	if !inline {
		d.text(label, lo+2, st, it.when)
	}
	row := d.blank()
	if inline {
		d.stamp(row, it.when)
	}
	for c := lo + 1; c < hi; c++ {
		if row[c].st == stLife {
			row[c] = cell{'┼', st}
		} else {
			row[c] = cell{'─', st}
		}
	}
	if xb > xa {
		row[xb-1] = cell{'►', st}
	} else {
		row[xb+1] = cell{'◄', st}
	}
	if inline {
		d.put(row, lo+2, " "+label+" ", st)
	}
	d.rows = append(d.rows, row)
}

func (d *diagram) note(it item, mark rune, st int) {
	x := d.x[it.lane]
	text := it.label
	right := d.width - (x + 2)
	left := x - 1 - d.margin
	row := d.blank()
	row[x] = cell{mark, st}
	d.stamp(row, it.when)
	switch {
	case width(text) <= right:
		d.put(row, x+2, text, st)
		d.rows = append(d.rows, row)
	case width(text) <= left:
		d.put(row, x-1-width(text), text, st)
		d.rows = append(d.rows, row)
	default:
		room := max(right, left)
		lines := wrap(text, room)
		widest := 0
		for _, l := range lines {
			widest = max(widest, width(l))
		}
		for i, l := range lines {
			if i > 0 {
				row = d.blank()
			}
			if right >= left {
				d.put(row, x+2, l, st)
			} else {
				d.put(row, x-1-widest, l, st)
			}
			d.rows = append(d.rows, row)
		}
	}
}

func (d *diagram) draw(its []item) {
	d.header()
	for _, it := range its {
		switch it.kind {
		case "arrow":
			d.arrow(it)
		case "fault":
			d.note(it, '✕', stFault)
		case "note":
			d.note(it, '•', stNote)
		case "step":
			d.text("» "+it.label, d.margin, stStep, it.when)
		case "text":
			d.text(it.label, d.margin+2, stArrow, it.when)
		}
	}
}

func (d *diagram) write(w io.Writer) {
	for _, row := range d.rows {
		var b strings.Builder
		// Trailing blanks and lifelines only: no spaces at the end of lines.
		end := len(row)
		for end > 0 && row[end-1].r == ' ' {
			end--
		}
		for i := 0; i < end; {
			j := i
			for j < end && row[j].st == row[i].st {
				j++
			}
			var s strings.Builder
			for _, c := range row[i:j] {
				s.WriteRune(c.r)
			}
			b.WriteString(d.style(row[i].st).Sprint(s.String()))
			i = j
		}
		fmt.Fprintln(w, b.String())
	}
}

func (d *diagram) style(st int) colorer {
	switch st {
	case stLife, stTime, stNote:
		return d.p.dim
	case stFault:
		return d.p.bad
	case stStep:
		return d.p.bold
	case stAnswer:
		return d.p.ok
	}
	return plain{}
}

// timelineObserver prints each phase as a sequence diagram when it ends,
// then its balances and verdict as the story does.
type timelineObserver struct {
	*storyObserver
}

func (t timelineObserver) Event(scenarios.Event) {}

func (t timelineObserver) PhaseEnd(r scenarios.PhaseReport) {
	t.mu.Lock()
	t.phaseHeader()
	h := newHumanizer(r.Labels)
	its := items(r, h)
	w := t.width
	if w <= 0 {
		w = 80
	}
	d := newDiagram(lanesOf(its), min(w, 120), t.p)
	d.draw(its)
	d.write(t.out)
	t.wrapped("   ", "", r.Balances, t.p.bold)
	for _, e := range r.Expectations {
		if !e.OK {
			ok := false
			t.expectation(scenarios.Event{Kind: scenarios.KindExpect, OK: &ok, Source: e.Source}, h.text(e.Text))
		}
	}
	t.mu.Unlock()
	t.storyObserver.PhaseEnd(r)
}

// mermaidObserver writes each phase as a Mermaid sequence diagram in a
// Markdown document, for slides and docs: one fenced block per phase.
type mermaidObserver struct {
	out  io.Writer
	mu   sync.Mutex
	s    scenarios.Scenario
	seed uint64
}

func (m *mermaidObserver) ScenarioStart(s scenarios.Scenario, seed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s, m.seed = s, seed
	fmt.Fprintf(m.out, "## %s · %s\n\n%s\n", s.Name, s.DisplayTitle(), s.Summary)
}

func (m *mermaidObserver) PhaseStart(scenarios.Phase, int) {}
func (m *mermaidObserver) Event(scenarios.Event)           {}

func (m *mermaidObserver) PhaseEnd(r scenarios.PhaseReport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	its := items(r, newHumanizer(r.Labels))
	// Only the lanes something happens on: the text picture keeps a lane
	// for the network that arrows cross, but a Mermaid arrow goes straight
	// from client to server, and an unused participant is an empty column.
	used := map[string]bool{}
	for _, it := range its {
		switch it.kind {
		case "arrow":
			used[it.from], used[it.to] = true, true
		case "fault", "note":
			used[it.lane] = true
		}
	}
	var lanes []string
	for _, l := range lanesOf(its) {
		if used[l] {
			lanes = append(lanes, l)
		}
	}
	id := map[string]string{}
	fmt.Fprintf(m.out, "\n### %s\n\n```mermaid\nsequenceDiagram\n", mermaidText(r.Title))
	for i, l := range lanes {
		id[l] = fmt.Sprintf("L%d", i)
		name := l
		if isClient(l) && l != "client" {
			name = l + "'s app"
		}
		fmt.Fprintf(m.out, "    participant %s as %s\n", id[l], mermaidText(name))
	}
	span := "L0"
	if len(lanes) > 1 {
		span = fmt.Sprintf("L0,L%d", len(lanes)-1)
	}
	for _, it := range its {
		switch it.kind {
		case "arrow":
			arrow := "->>"
			if it.answer {
				arrow = "-->>"
			}
			fmt.Fprintf(m.out, "    %s%s%s: %s\n", id[it.from], arrow, id[it.to], mermaidText(it.label))
		case "fault":
			fmt.Fprintf(m.out, "    Note over %s: ✕ %s\n", id[it.lane], mermaidText(it.label))
		case "note":
			fmt.Fprintf(m.out, "    Note over %s: %s\n", id[it.lane], mermaidText(it.label))
		case "step", "text":
			if len(lanes) == 0 {
				fmt.Fprintf(m.out, "    participant L0 as story\n")
				lanes = []string{"story"}
			}
			fmt.Fprintf(m.out, "    Note over %s: %s\n", span, mermaidText(it.label))
		}
	}
	if len(lanes) == 0 {
		fmt.Fprintf(m.out, "    participant L0 as bank\n")
	}
	fmt.Fprintf(m.out, "    Note over %s: %s\n", span, mermaidText(r.Balances))
	fmt.Fprintf(m.out, "    Note over %s: %s\n", span, mermaidText(mermaidVerdict(r)))
	fmt.Fprintf(m.out, "```\n")
}

func (m *mermaidObserver) ScenarioEnd(r scenarios.Report) {
	m.mu.Lock()
	defer m.mu.Unlock()
	status := "PASS"
	if !r.Passed {
		status = "FAIL"
	}
	fmt.Fprintf(m.out, "\n%s %s (seed %d): %s\n\n", status, r.Scenario, r.Seed, mermaidText(r.Verdict))
}

func mermaidVerdict(r scenarios.PhaseReport) string {
	h := newHumanizer(r.Labels)
	if r.Control && r.Passed {
		for _, c := range r.Invariants {
			if !c.OK {
				return "⇒ what goes wrong: " + c.Name + " — " + h.text(c.Detail)
			}
		}
	}
	if r.Passed {
		return "✓ " + r.Verdict
	}
	return "✗ FAILED: " + h.text(r.Verdict)
}

// mermaidText keeps a label from breaking Mermaid's syntax: ";" ends a
// statement and "#" starts an entity there.
func mermaidText(s string) string {
	return strings.NewReplacer(";", ",", "#", "no. ", "\n", " ").Replace(s)
}
