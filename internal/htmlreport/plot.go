package htmlreport

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"

	"github.com/banksim/bank-sim/chaos"
)

// Two plots over the run's time, in buckets: throughput (intents settled,
// attempts finished) and latency (the median and the 99th percentile of
// the attempts that finished in each bucket). Under each, a strip counts
// the faults that struck in each bucket; the audits' snapshots, healing,
// the cleanup job and kills of PostgreSQL are vertical lines across them,
// as on the timeline. A table under the plots gives the same numbers.

const (
	plWidth  = 1100
	plLeft   = 74
	plRight  = 16
	plTop    = 24
	plHeight = 170
	buckets  = 50
)

type bucket struct {
	settled, attempts, faults int
	lat                       []int64
}

// pct is the p-th percentile of sorted (nearest rank).
func pct(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

func overTimeHTML(h *chaos.History, res chaos.Result, c clock) template.HTML {
	n := buckets
	bw := float64(c.end) / float64(n)
	at := func(v int64) int { return min(max(int(float64(v)/bw), 0), n-1) }
	bs := make([]bucket, n)
	for i := range h.Intents {
		in := &h.Intents[i]
		settled := false
		// Every request the server met, the one sent without the key too;
		// only the key's answers settle the intent.
		for _, a := range in.Requests() {
			k := at(a.EndNs)
			bs[k].attempts++
			bs[k].lat = append(bs[k].lat, a.EndNs-a.StartNs)
			if a.Fault != "" {
				bs[at(a.StartNs)].faults++
			}
			if !settled && a != in.Keyless && a.Seen != chaos.SeenUnknown {
				settled = true
				bs[k].settled++
			}
		}
	}
	for k := range bs {
		sort.Slice(bs[k].lat, func(a, b int) bool { return bs[k].lat[a] < bs[k].lat[b] })
	}
	// Rates per second, or per 1,000 steps in a deterministic run.
	per, perWord := 1e9/bw, "per second"
	latDiv, latUnit := 1e6, "ms"
	if c.det {
		per, perWord = 1000/bw, "per 1,000 steps"
		latDiv, latUnit = 1, "steps"
	}
	rate := func(v int) float64 { return float64(v) * per }

	var maxRate, maxLat float64
	for _, b := range bs {
		maxRate = max(maxRate, rate(b.attempts), rate(b.settled))
		maxLat = max(maxLat, float64(pct(b.lat, .99))/latDiv)
	}

	tp := newPlot(c, "throughput", "Throughput over time: intents settled and attempts finished "+perWord, "intents settled "+perWord, maxRate)
	var bars, line strings.Builder
	for k, b := range bs {
		x1, x2 := tp.xb(k, n), tp.xb(k+1, n)
		if b.settled > 0 {
			y := tp.y(rate(b.settled))
			fmt.Fprintf(&bars, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s–%s: %d intents settled (%s %s)</title></rect>`,
				x1+.5, y, max(x2-x1-1, .5), float64(plTop+plHeight)-y, Esc(c.at(int64(float64(k)*bw))), Esc(c.at(int64(float64(k+1)*bw))), b.settled, num(rate(b.settled)), perWord)
		}
		cmd := "L"
		if k == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&line, "%s%.1f %.1f", cmd, (x1+x2)/2, tp.y(rate(b.attempts)))
	}
	tp.b.WriteString(bars.String())
	fmt.Fprintf(&tp.b, `<path class="line-att" d="%s"><title>attempts finished %s</title></path>`, line.String(), perWord)
	tp.faultStrip(bs)
	tp.moments(h)

	lp := newPlot(c, "latency", "Latency over time: the median and 99th percentile of the attempts that finished in each bucket", "attempt latency ("+latUnit+")", maxLat)
	var p50, p99 strings.Builder
	gap := true
	for k, b := range bs {
		if len(b.lat) == 0 {
			gap = true
			continue
		}
		cmd := "L"
		if gap {
			cmd = "M"
		}
		gap = false
		xm := (lp.xb(k, n) + lp.xb(k+1, n)) / 2
		fmt.Fprintf(&p50, "%s%.1f %.1f", cmd, xm, lp.y(float64(pct(b.lat, .5))/latDiv))
		fmt.Fprintf(&p99, "%s%.1f %.1f", cmd, xm, lp.y(float64(pct(b.lat, .99))/latDiv))
	}
	fmt.Fprintf(&lp.b, `<path class="line-p99" d="%s"><title>99th percentile</title></path><path class="line-p50" d="%s"><title>median</title></path>`, p99.String(), p50.String())
	lp.faultStrip(bs)
	lp.moments(h)

	var out strings.Builder
	out.WriteString(`<p class="legend">Throughput: <svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="bar"/></svg> intents settled (bars) · <svg width="22" height="10" aria-hidden="true"><path d="M1 5h20" class="line-att"/></svg> attempts finished (dotted line). Latency: <svg width="22" height="10" aria-hidden="true"><path d="M1 5h20" class="line-p50"/></svg> median (solid) · <svg width="22" height="10" aria-hidden="true"><path d="M1 5h20" class="line-p99"/></svg> 99th percentile (dashed). Under each plot: <svg width="10" height="10" aria-hidden="true"><rect x="1" y="1" width="8" height="8" class="faultbar"/></svg> faults that struck in each bucket. Vertical lines: audits' snapshots (dashed; ticks along the top when there are many), healing and cleanup (dotted), PostgreSQL killed (thick).</p>`)
	out.WriteString(string(tp.html()))
	out.WriteString(string(lp.html()))

	t := Table{ID: "buckets", Head: []string{"from", "to", "intents settled", "attempts finished", "faults struck", "median latency", "p99 latency"}}
	for k, b := range bs {
		if b.attempts == 0 && b.faults == 0 {
			continue
		}
		med, p := "—", "—"
		if len(b.lat) > 0 {
			med, p = c.span(pct(b.lat, .5)), c.span(pct(b.lat, .99))
		}
		t.Rows = append(t.Rows, []Cell{C(c.at(int64(float64(k) * bw))), C(c.at(int64(float64(k+1) * bw))), {Text: fmt.Sprint(b.settled), Class: "num"},
			{Text: fmt.Sprint(b.attempts), Class: "num"}, {Text: fmt.Sprint(b.faults), Class: "num"}, {Text: med, Class: "num"}, {Text: p, Class: "num"}})
	}
	fmt.Fprintf(&out, "<details><summary>The numbers, bucket by bucket (%d buckets of %s)</summary>%s</details>", n, Esc(c.span(int64(bw))), t.HTML())
	return template.HTML(out.String())
}

// plot is one plot's frame: axes with ticks and labels, in user units.
type plot struct {
	c     clock
	class string
	label string
	ymax  float64
	b     strings.Builder
}

func newPlot(c clock, class, label, ytitle string, ymax float64) *plot {
	step := niceStep(ymax / 5)
	ymax = math.Max(step*math.Ceil(ymax/step), step)
	p := &plot{c: c, class: class, label: label, ymax: ymax}
	plotW := float64(plWidth - plLeft - plRight)
	bottom := plTop + plHeight
	for v := 0.0; v <= ymax*1.0001; v += step {
		y := p.y(v)
		fmt.Fprintf(&p.b, `<line class="grid" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/><text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>`,
			plLeft, y, plWidth-plRight, y, plLeft-4, y+3, num(v))
	}
	ticks, labels := c.ticks(10)
	for i, t := range ticks {
		x := p.x(t)
		fmt.Fprintf(&p.b, `<line class="axis" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x, bottom, x, bottom+4, x, bottom+14, labels[i])
	}
	fmt.Fprintf(&p.b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/><line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`,
		plLeft, plTop, plLeft, bottom, plLeft, bottom, plWidth-plRight, bottom)
	fmt.Fprintf(&p.b, `<text class="axis-label x-label" x="%.0f" y="%d" text-anchor="middle">%s</text>`, plLeft+plotW/2, bottom+62, Esc(c.axisTitle()))
	fmt.Fprintf(&p.b, `<text class="axis-label y-label" transform="rotate(-90)" x="%d" y="14" text-anchor="middle">%s</text>`, -(plTop + plHeight/2), Esc(ytitle))
	return p
}

func (p *plot) x(v int64) float64 {
	return plLeft + float64(v)/float64(p.c.end)*float64(plWidth-plLeft-plRight)
}

// xb is the left edge of bucket k of n.
func (p *plot) xb(k, n int) float64 {
	return plLeft + float64(k)/float64(n)*float64(plWidth-plLeft-plRight)
}

func (p *plot) y(v float64) float64 {
	return float64(plTop+plHeight) - v/p.ymax*plHeight
}

// faultStrip counts, under the plot, the faults that struck in each
// bucket: a bar as high as their number.
func (p *plot) faultStrip(bs []bucket) {
	most := 0
	for _, b := range bs {
		most = max(most, b.faults)
	}
	base := plTop + plHeight + 40
	fmt.Fprintf(&p.b, `<text class="tick" x="%d" y="%d" text-anchor="end">faults</text>`, plLeft-4, base)
	if most == 0 {
		fmt.Fprintf(&p.b, `<text class="tick" x="%d" y="%d">no fault struck</text>`, plLeft+4, base)
		return
	}
	for k, b := range bs {
		if b.faults == 0 {
			continue
		}
		hgt := math.Max(float64(b.faults)/float64(most)*18, 1.5)
		x1, x2 := p.xb(k, len(bs)), p.xb(k+1, len(bs))
		fmt.Fprintf(&p.b, `<rect class="faultbar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%d fault(s) struck</title></rect>`, x1+.5, float64(base)-hgt, max(x2-x1-1, .5), hgt, b.faults)
	}
}

func (p *plot) moments(h *chaos.History) {
	p.b.WriteString(string(momentLines(h, p.c, p.x, plTop, plTop+plHeight, 4, plLeft-4)))
}

func (p *plot) html() template.HTML {
	s := &SVG{W: plWidth, H: plTop + plHeight + 70, Class: "plot " + p.class, Label: p.label}
	s.Raw(p.b.String())
	return s.HTML()
}
