package htmlreport

import (
	"fmt"
	"html/template"
	"strings"
	"unicode/utf8"
)

// Sequence is a sequence diagram: participants as lanes, one row per thing
// that happened, top to bottom. The caller (which knows what a story's
// events mean) fills it; this draws it as SVG. Every row is a <g> with a
// class saying what it is and data-events saying how many of the run's
// events it stands for, so a test can check that the picture accounts for
// every event.
type Sequence struct {
	// Label is the picture's accessible name.
	Label string
	Lanes []SeqLane
	Rows  []SeqRow
}

// SeqLane is one participant: ID is what rows name, Name what is shown.
type SeqLane struct {
	ID, Name string
}

// Kinds of SeqRow.
const (
	SeqRequest = "request" // an arrow From → To, solid
	SeqAnswer  = "answer"  // an arrow From → To carrying an answer, dashed
	SeqNote    = "note"    // a note at Lane
	SeqFault   = "fault"   // a fault that struck at Lane, marked ✕
	SeqStep    = "step"    // narration across the whole diagram
	SeqText    = "text"    // a remark across the diagram (a summary of rows left out)
)

// SeqRow is one row of a Sequence.
type SeqRow struct {
	Kind           string
	From, To, Lane string
	Label          string
	// When is shown in the left margin ("12 ms", "+31 s").
	When string
	// Events is how many of the run's events the row draws.
	Events int
}

// Geometry, in SVG user units. Text is measured by an estimate of its
// width: the page has no fonts of its own to measure, and a label that runs
// a little short of its room is better than one cut off.
const (
	seqMargin  = 70  // the time column
	seqColumn  = 190 // per lane
	seqTop     = 44  // below the lane names
	seqLine    = 16  // a line of text
	seqCharW   = 7.2 // an average character at 13px
	seqPadding = 10
)

// SVG draws the diagram.
func (q Sequence) SVG() template.HTML {
	n := max(len(q.Lanes), 1)
	w := seqMargin + n*seqColumn + seqPadding
	x := map[string]float64{}
	for i, l := range q.Lanes {
		x[l.ID] = float64(seqMargin + i*seqColumn + seqColumn/2)
	}
	var body strings.Builder
	y := float64(seqTop + 12)
	for _, r := range q.Rows {
		y = q.row(&body, r, x, float64(w), y)
	}
	h := int(y) + seqPadding
	s := SVG{W: w, H: h, Label: q.Label, Class: "seq"}
	for _, l := range q.Lanes {
		lx := x[l.ID]
		bw := float64(seqColumn - 24)
		s.Raw(fmt.Sprintf(`<g class="lane" data-lane="%s">`, Esc(l.ID)))
		s.Rect(lx-bw/2, 6, bw, 26, "lanebox", "")
		s.Text(lx, 24, "middle", "lanename", fit(l.Name, int(bw/seqCharW)))
		s.Line(lx, 32, lx, float64(h-seqPadding), "life")
		s.Raw("</g>")
	}
	s.Raw(body.String())
	return s.HTML()
}

// row draws one row from y down and returns where the next starts.
func (q Sequence) row(b *strings.Builder, r SeqRow, x map[string]float64, w, y float64) float64 {
	var s SVG
	when := func(at float64) {
		if r.When != "" {
			s.Text(4, at, "start", "when", fit(r.When, 8))
		}
	}
	lines := func(text string, room float64) []string {
		return wrapChars(text, max(int(room/seqCharW), 12))
	}
	attrs := fmt.Sprintf(` data-events="%d"`, max(r.Events, 0))
	switch r.Kind {
	case SeqRequest, SeqAnswer:
		xa, xb := x[r.From], x[r.To]
		lo := min(xa, xb)
		ls := lines(r.Label, w-lo-8-seqPadding)
		for i, l := range ls {
			s.Text(lo+8, y+float64(i)*seqLine+10, "start", "label", l)
		}
		when(y + 10)
		ly := y + float64(len(ls))*seqLine + 2
		cls := "arrow"
		if r.Kind == SeqAnswer {
			cls = "arrow dashed"
		}
		s.Line(xa, ly, xb, ly, cls)
		dir := 1.0
		if xb < xa {
			dir = -1
		}
		s.Path(fmt.Sprintf("M%.1f %.1f L%.1f %.1f L%.1f %.1f Z", xb, ly, xb-dir*9, ly-4.5, xb-dir*9, ly+4.5), "head")
		attrs += fmt.Sprintf(` data-from="%s" data-to="%s"`, Esc(r.From), Esc(r.To))
		fmt.Fprintf(b, `<g class="msg %s"%s>%s</g>`, r.Kind, attrs, s.b.String())
		return ly + 14
	case SeqNote, SeqFault:
		lx := x[r.Lane]
		right := w - lx - 14 - seqPadding
		left := lx - 14 - seqMargin
		mark, cls := "•", "note"
		if r.Kind == SeqFault {
			mark, cls = "✕", "fault"
		}
		room, anchor, tx := right, "start", lx+12
		if right < left && float64(utf8.RuneCountInString(r.Label))*seqCharW > right {
			room, anchor, tx = left, "end", lx-12
		}
		ls := lines(r.Label, room)
		bw := min(room, float64(widest(ls))*seqCharW) + 8
		bx := tx - 4
		if anchor == "end" {
			bx = tx - bw + 4
		}
		s.Rect(bx, y-2, bw, float64(len(ls))*seqLine+6, cls+"box", "")
		s.Text(lx, y+11, "middle", cls+"mark", mark)
		for i, l := range ls {
			s.Text(tx, y+float64(i)*seqLine+11, anchor, cls, l)
		}
		when(y + 11)
		attrs += fmt.Sprintf(` data-lane="%s"`, Esc(r.Lane))
		fmt.Fprintf(b, `<g class="%s"%s>%s</g>`, cls, attrs, s.b.String())
		return y + float64(len(ls))*seqLine + 12
	default: // step, text
		cls := "story"
		label := r.Label
		if r.Kind == SeqStep {
			cls = "step"
			label = "» " + label
		}
		ls := lines(label, w-seqMargin-seqPadding)
		if r.Kind == SeqStep {
			s.Rect(seqMargin-4, y-2, w-seqMargin-seqPadding+4, float64(len(ls))*seqLine+6, "stepbox", "")
		}
		for i, l := range ls {
			s.Text(seqMargin, y+float64(i)*seqLine+11, "start", cls, l)
		}
		when(y + 11)
		fmt.Fprintf(b, `<g class="%s"%s>%s</g>`, cls, attrs, s.b.String())
		return y + float64(len(ls))*seqLine + 12
	}
}

// SequenceCSS styles the diagrams; Docs that draw one add it with Style.
const SequenceCSS = `
svg.seq { display: block; margin: .6rem 0; }
svg.seq text { font-size: 13px; }
svg.seq .lanebox { fill: var(--soft); stroke: var(--ink); stroke-width: 1; }
svg.seq .lanename { font-weight: 700; }
svg.seq .life { stroke: var(--muted); stroke-width: 1; stroke-dasharray: 2 3; }
svg.seq .arrow { stroke: var(--ink); stroke-width: 1.4; }
svg.seq .arrow.dashed { stroke-dasharray: 6 4; }
svg.seq .head { fill: var(--ink); }
svg.seq .msg.answer .arrow, svg.seq .msg.answer .head { stroke: var(--ok); fill: var(--ok); }
svg.seq .msg.answer .head { stroke: none; }
svg.seq .when { fill: var(--muted); font-size: 11px; }
svg.seq .notebox { fill: #fffbe6; stroke: #d4a72c; stroke-width: .8; }
svg.seq .faultbox { fill: #ffebe9; stroke: var(--bad); stroke-width: 1.2; }
svg.seq text.fault { fill: var(--bad); }
svg.seq text.faultmark { fill: var(--bad); font-weight: 700; }
svg.seq .stepbox { fill: var(--soft); stroke: none; }
svg.seq text.step { font-weight: 700; }
svg.seq text.story { font-style: italic; fill: var(--muted); }
@media print { svg.seq .notebox, svg.seq .faultbox, svg.seq .stepbox { fill: none; } }
`

func widest(ls []string) int {
	n := 0
	for _, l := range ls {
		n = max(n, utf8.RuneCountInString(l))
	}
	return n
}

// fit cuts s to n characters, ending in "…" when it cut.
func fit(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 2 {
		return s
	}
	return string(r[:n-1]) + "…"
}

// wrapChars breaks text into lines of at most n characters at spaces; a
// longer word is cut.
func wrapChars(text string, n int) []string {
	if utf8.RuneCountInString(text) <= n {
		return []string{text}
	}
	var out []string
	line := ""
	for _, word := range strings.Fields(text) {
		for utf8.RuneCountInString(word) > n {
			if line != "" {
				out = append(out, line)
				line = ""
			}
			r := []rune(word)
			out = append(out, string(r[:n]))
			word = string(r[n:])
		}
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= n:
			line += " " + word
		default:
			out = append(out, line)
			line = word
		}
	}
	if line != "" {
		out = append(out, line)
	}
	return out
}
