package htmlreport_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/internal/htmlreport"
)

// Issue 29, item 11: every page runs its own scripts only, each pinned by
// the hash of its exact text; no 'unsafe-inline', no form posts, no <base>.
func TestEveryPagesPolicyPinsItsOwnScriptsOnly(t *testing.T) {
	t.Parallel()
	withScripts := sample()
	withScripts.Script("document.body.dataset.a = '1';")
	withScripts.Script("document.body.dataset.b = '</scr' + 'ipt>';")
	var a, b bytes.Buffer
	if err := withScripts.Render(&a); err != nil {
		t.Fatal(err)
	}
	if err := sample().Render(&b); err != nil {
		t.Fatal(err)
	}
	for name, page := range map[string][]byte{
		"a report with two scripts": a.Bytes(),
		"a report without scripts":  b.Bytes(),
		"the classroom page":        htmlreport.ClassroomPage("lost-response", "/state", "/next"),
	} {
		if p := htmlreport.PolicyProblems(page); p != nil {
			t.Errorf("%s: %s", name, strings.Join(p, "; "))
		}
	}
	// The checker itself: a script the policy does not list, and the old
	// policy, are problems.
	page := a.Bytes()
	extra := bytes.Replace(page, []byte("</body>"), []byte("<script>alert(1)</script></body>"), 1)
	old := bytes.Replace(page, []byte("form-action 'none'"), []byte("script-src 'unsafe-inline'"), 1)
	for name, p := range map[string][]byte{"an injected script": extra, "unsafe-inline": old} {
		if htmlreport.PolicyProblems(p) == nil {
			t.Errorf("%s: PolicyProblems found nothing wrong", name)
		}
	}
}
