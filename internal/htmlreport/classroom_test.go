package htmlreport_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/internal/htmlreport"
)

// The classroom page's Next bar is fixed to the window's bottom: the page
// keeps its measured height clear below the story, and scrolling the newest
// part (a phase's verdict) into view leaves that room too, or the verdict
// lies under the bar until the next click.
func TestClassroomPageKeepsTheVerdictClearOfTheNextBar(t *testing.T) {
	page := string(htmlreport.ClassroomPage("t", "/state", "/next"))
	rule := func(sel string) string {
		t.Helper()
		// Every rule for sel, in order: the later ones win.
		var all []string
		for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(sel)+` \{([^}]*)\}`).FindAllStringSubmatch(page, -1) {
			all = append(all, m[1])
		}
		if all == nil {
			t.Fatalf("the page's style has no rule for %s", sel)
		}
		return strings.Join(all, " ")
	}
	if bar := rule("#bar"); !strings.Contains(bar, "position: fixed") || !strings.Contains(bar, "bottom: 0") {
		t.Fatalf("the Next bar is no longer fixed to the bottom (%s): this test's premise is gone", bar)
	}
	if root := rule(":root"); !regexp.MustCompile(`scroll-padding-bottom: calc\(var\(--bar\) \+ [\d.]+rem\)`).MatchString(root) {
		t.Errorf("scrolling into view does not leave the bar's height clear: :root {%s}", root)
	}
	if body := rule("body"); !regexp.MustCompile(`padding: [^;]*?\S+ \S+ calc\(var\(--bar\) \+ [\d.]+rem\)`).MatchString(body) {
		t.Errorf("the page keeps no room for the bar below its last line: body {%s}", body)
	}
	// --bar is the bar as drawn, measured before each scroll.
	js := page[strings.Index(page, "<script>"):]
	apply := js[strings.Index(js, "function apply("):]
	apply = apply[:strings.Index(apply, "\n  }\n")]
	fit, scroll := strings.Index(apply, "fitBar()"), strings.Index(apply, "scrollIntoView(")
	if fit < 0 || scroll < 0 || fit > scroll {
		t.Errorf("apply does not measure the bar (fitBar) before it scrolls:\n%s", apply)
	}
	if !strings.Contains(js, "setProperty('--bar', bar.offsetHeight + 'px')") || !strings.Contains(js, "getElementById('bar')") {
		t.Errorf("the script does not set --bar from the bar's drawn height")
	}
}
