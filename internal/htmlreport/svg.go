package htmlreport

import (
	"fmt"
	"html/template"
	"strings"
)

// SVG builds an inline SVG picture in user units (the picture scales to the
// page; print keeps it sharp). Every text is escaped.
type SVG struct {
	W, H int
	// Label is the picture's accessible name (role="img").
	Label string
	Class string
	b     strings.Builder
}

// Rect draws a rectangle; title, when set, is shown on hover.
func (s *SVG) Rect(x, y, w, h float64, class, title string) {
	fmt.Fprintf(&s.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"%s>%s</rect>`, x, y, w, h, cls(class), tip(title))
}

// Line draws a line.
func (s *SVG) Line(x1, y1, x2, y2 float64, class string) {
	fmt.Fprintf(&s.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"%s/>`, x1, y1, x2, y2, cls(class))
}

// Circle draws a circle.
func (s *SVG) Circle(cx, cy, r float64, class, title string) {
	fmt.Fprintf(&s.b, `<circle cx="%.1f" cy="%.1f" r="%.1f"%s>%s</circle>`, cx, cy, r, cls(class), tip(title))
}

// Path draws an SVG path (d is path data).
func (s *SVG) Path(d, class string) {
	fmt.Fprintf(&s.b, `<path d="%s"%s/>`, Esc(d), cls(class))
}

// Polyline draws connected points.
func (s *SVG) Polyline(xs, ys []float64, class string) {
	var p strings.Builder
	for i := range xs {
		if i > 0 {
			p.WriteByte(' ')
		}
		fmt.Fprintf(&p, "%.1f,%.1f", xs[i], ys[i])
	}
	fmt.Fprintf(&s.b, `<polyline points="%s" fill="none"%s/>`, p.String(), cls(class))
}

// Text writes text; anchor is "start", "middle" or "end".
func (s *SVG) Text(x, y float64, anchor, class, text string) {
	if anchor == "" {
		anchor = "start"
	}
	fmt.Fprintf(&s.b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>%s</text>`, x, y, anchor, cls(class), Esc(text))
}

// Raw appends SVG markup the caller has built (and escaped) itself, such as
// a <g> with an id.
func (s *SVG) Raw(markup string) { s.b.WriteString(markup) }

// HTML returns the picture.
func (s *SVG) HTML() template.HTML {
	return template.HTML(fmt.Sprintf(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s"%s>%s</svg>`,
		s.W, s.H, s.W, s.H, Esc(s.Label), cls(s.Class), s.b.String()))
}

func cls(c string) string {
	if c == "" {
		return ""
	}
	return fmt.Sprintf(` class="%s"`, Esc(c))
}

func tip(t string) string {
	if t == "" {
		return ""
	}
	return "<title>" + Esc(t) + "</title>"
}
