package htmlreport_test

import (
	"html"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

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

// Long text (PostgreSQL's errors, a constraint's name longer than a lane)
// stays inside its box: every line of a note or fault within its rectangle,
// every line of an arrow or a step within the picture.
func TestSequenceKeepsLongTextInsideItsBox(t *testing.T) {
	long := `INSERT INTO transfers VALUES (1, 99, 1000000, 'ada-to-99'): ERROR insert or update on table "transfers" violates foreign key constraint "transfers_to_account_fkey_with_a_much_longer_name_than_any_lane"`
	q := htmlreport.Sequence{Label: "long", Lanes: []htmlreport.SeqLane{{ID: "Ada", Name: "Ada's app"}, {ID: "server", Name: "server"}, {ID: "database", Name: "database"}},
		Rows: []htmlreport.SeqRow{
			{Kind: htmlreport.SeqRequest, From: "server", To: "database", Label: long},
			{Kind: htmlreport.SeqNote, Lane: "server", Label: long},
			{Kind: htmlreport.SeqFault, Lane: "database", Label: long},
			{Kind: htmlreport.SeqNote, Lane: "Ada", Label: long},
			{Kind: htmlreport.SeqStep, Label: long},
		}}
	svg := string(q.SVG())
	width, _ := strconv.ParseFloat(regexp.MustCompile(`viewBox="0 0 ([\d.]+) `).FindStringSubmatch(svg)[1], 64)
	num := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	const charW = 7.2 // the diagram's own estimate of a character at 13px
	rowRE := regexp.MustCompile(`<g class="(msg request|note|fault|step)"[^>]*>(.*?)</g>`)
	rectRE := regexp.MustCompile(`<rect x="([\d.-]+)" y="[\d.-]+" width="([\d.]+)"`)
	textRE := regexp.MustCompile(`<text x="([\d.-]+)" y="[\d.-]+" text-anchor="(\w+)" class="(?:label|note|fault|step)">([^<]*)</text>`)
	rows := rowRE.FindAllStringSubmatch(svg, -1)
	if len(rows) != len(q.Rows) {
		t.Fatalf("%d rows drawn, want %d", len(rows), len(q.Rows))
	}
	for _, row := range rows {
		lo, hi := 0.0, width
		if r := rectRE.FindStringSubmatch(row[2]); r != nil && row[1] != "msg request" {
			lo, hi = num(r[1]), num(r[1])+num(r[2])
		}
		texts := textRE.FindAllStringSubmatch(row[2], -1)
		if len(texts) < 2 {
			t.Errorf("%s: the long label is on %d line(s), want it wrapped", row[1], len(texts))
		}
		for _, tx := range texts {
			n := float64(utf8.RuneCountInString(html.UnescapeString(tx[3])))
			x0, x1 := num(tx[1]), num(tx[1])+n*charW
			if tx[2] == "end" {
				x0, x1 = num(tx[1])-n*charW, num(tx[1])
			}
			if x0 < lo-0.5 || x1 > hi+0.5 {
				t.Errorf("%s: line %q spans %.0f–%.0f, outside its box %.0f–%.0f", row[1], tx[3], x0, x1, lo, hi)
			}
		}
	}
}
