package htmlreport_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/internal/htmlreport"
)

// A diagram escapes every label, draws one participant per lane and one
// group per row, and each row says how many of the run's events it draws:
// the browser tests add those up against the run's own events.
func TestSequenceDrawsEveryRowEscaped(t *testing.T) {
	t.Parallel()
	q := htmlreport.Sequence{Label: "a <phase>", Lanes: []htmlreport.SeqLane{{ID: "Ada", Name: "Ada's app"}, {ID: "network", Name: "network"}, {ID: "server", Name: "server"}}}
	q.Rows = []htmlreport.SeqRow{
		{Kind: htmlreport.SeqStep, Label: "Ada sends <₦10,000>", Events: 1},
		{Kind: htmlreport.SeqRequest, From: "Ada", To: "server", Label: "attempt 1 & more", Events: 2},
		{Kind: htmlreport.SeqFault, Lane: "network", Label: strings.Repeat("a long fault description ", 8), Events: 1},
		{Kind: htmlreport.SeqAnswer, From: "server", To: "Ada", Label: "201", When: "57 ms", Events: 2},
		{Kind: htmlreport.SeqNote, Lane: "server", Label: "copy 2 waits", Events: 1},
		{Kind: htmlreport.SeqText, Label: "… 5 more requests like it", Events: 10},
	}
	out := string(q.SVG())
	for _, want := range []string{"Ada sends &lt;₦10,000&gt;", "attempt 1 &amp; more", `aria-label="a &lt;phase&gt;"`, "57 ms", `data-from="server" data-to="Ada"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the diagram lacks %q", want)
		}
	}
	if n := strings.Count(out, `<g class="lane"`); n != 3 {
		t.Errorf("%d participants, want 3", n)
	}
	sum := 0
	for _, m := range regexp.MustCompile(`data-events="(\d+)"`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		sum += n
	}
	if sum != 17 {
		t.Errorf("the rows draw %d events, want 17", sum)
	}
	// The long fault wraps onto lines of its own instead of running off.
	if n := strings.Count(out, `class="fault"`); n < 2 {
		t.Errorf("a long fault label on %d line(s), want it wrapped", n)
	}
	if strings.Contains(out, "<b>") || strings.Contains(out, "<phase>") {
		t.Errorf("unescaped text in %s", out)
	}
}
