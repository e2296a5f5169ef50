package htmlreport

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/banksim/bank-sim/chaos"
)

// clock reads a chaos history's offsets: nanoseconds since the run started,
// or, in a deterministic history, the scheduler's steps.
type clock struct {
	det  bool
	end  int64   // the last offset drawn (at least 1)
	div  float64 // offsets per axis unit
	unit string  // the axis unit: "ms", "s" or "steps"
}

func newClock(h *chaos.History) clock {
	var end int64
	see := func(v int64) { end = max(end, v) }
	for i := range h.Intents {
		for _, a := range h.Intents[i].Requests() {
			see(a.EndNs)
			see(a.StartNs)
		}
	}
	for _, a := range h.Audits {
		see(a.AtNs)
	}
	for _, c := range h.Crashes {
		see(c.UpNs)
	}
	for _, pc := range h.PrimaryChanges {
		see(pc.SeenNs)
	}
	if h.Cleanup != nil {
		see(h.Cleanup.AtNs)
	}
	c := clock{det: h.Deterministic != nil}
	switch {
	case c.det:
		see(int64(h.Deterministic.Steps))
		c.div, c.unit = 1, "steps"
	default:
		see(int64(h.Duration))
		c.div, c.unit = 1e6, "ms"
		if end >= int64(5*time.Second) {
			c.div, c.unit = 1e9, "s"
		}
	}
	c.end = max(end, 1)
	return c
}

// at says when an offset was: "1,159.278 ms" or "step 1234". One unit
// with fixed decimals for a whole report, so that a column of times reads
// down without "573.344ms" beside "1.159278s".
func (c clock) at(v int64) string {
	if c.det {
		return fmt.Sprintf("step %d", v)
	}
	return millis(v)
}

// span says how long an offset difference is, in at's unit.
func (c clock) span(v int64) string {
	if c.det {
		return fmt.Sprintf("%d steps", v)
	}
	return millis(v)
}

// millis is ns in milliseconds with three decimals (to the microsecond)
// and thousands grouped: "1,159.278 ms".
func millis(ns int64) string {
	sign := ""
	if ns < 0 {
		sign, ns = "-", -ns
	}
	us := (ns + 500) / 1000
	return fmt.Sprintf("%s%s.%03d ms", sign, group(us/1000), us%1000)
}

// group writes n with commas between thousands.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// axisTitle names the time axis with its unit.
func (c clock) axisTitle() string {
	if c.det {
		return "scheduler steps since the run started (a deterministic run counts steps, not time)"
	}
	return "time since the run started (" + c.unit + ")"
}

// ticks returns about n round positions (offsets) along [0, end] and their
// labels in axis units.
func (c clock) ticks(n int) ([]int64, []string) {
	span := float64(c.end) / c.div
	step := niceStep(span / float64(n))
	var at []int64
	var labels []string
	for v := 0.0; v <= span*1.0001; v += step {
		at = append(at, int64(math.Round(v*c.div)))
		labels = append(labels, strconv.FormatFloat(v, 'f', -1, 64))
		if len(at) > 4*n {
			break
		}
	}
	for i, l := range labels {
		// 0.30000000000000004 → 0.3
		if f, err := strconv.ParseFloat(l, 64); err == nil {
			labels[i] = strconv.FormatFloat(math.Round(f/step)*step, 'g', 6, 64)
		}
	}
	return at, labels
}

// niceStep is the round step (1, 2 or 5 × 10^k) nearest above raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// num formats a value for an axis or a table: no more digits than it needs.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
