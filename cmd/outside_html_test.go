package cmd_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/internal/htmlreport"
)

// markup would run, or break out of an attribute or of the page's style,
// if a report wrote it as it came.
const markup = `<script>alert(1)</script>"><img src=x onerror=alert(2)></style><b>`

// assertEscaped fails unless page shows markup escaped: not one of its
// tags raw, and its text there (so the test cannot pass on a page that
// left the outside text out).
func assertEscaped(t *testing.T, what, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: no report: %v", what, err)
	}
	page := string(data)
	for _, raw := range []string{"<script>alert", "<img src=x", "onerror=alert(2)>", "<b>"} {
		if strings.Contains(page, raw) {
			t.Errorf("%s: the report has outside markup raw: %q", what, raw)
		}
	}
	if n := strings.Count(page, "</style>"); n != 1 {
		t.Errorf("%s: %d </style>, want the page's own one only", what, n)
	}
	// Escaped as HTML (&lt;img) or quoted as JSON (\u003cimg), it shows.
	if !strings.Contains(page, "img src=x onerror=alert(2)") {
		t.Errorf("%s: the report does not show the outside text at all", what)
	}
	if p := htmlreport.PolicyProblems(data); p != nil {
		t.Errorf("%s: %s", what, strings.Join(p, "; "))
	}
}

// Issue 30, kind 7: markup in a target's answers (its error text and its
// transfer ids) is escaped in the reports of probe --html and chaos
// --target --html.
func TestATargetsMarkupIsEscapedInEveryReport(t *testing.T) {
	t.Parallel()
	srv := hostileTarget(t, markup, false)
	dir := t.TempDir()
	for _, args := range [][]string{
		{"probe", srv.URL},
		{"chaos", "--target", srv.URL, "--intents", "4"},
	} {
		page := filepath.Join(dir, args[0]+".html")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		r := run(t, ctx, mustNotStart(t), append(args, "--html", page)...)
		cancel()
		if r.code == 0 || r.code == 2 {
			t.Errorf("%v: exit %d, want a failed check\n%s\n%s", args, r.code, r.stdout, r.stderr)
		}
		assertEscaped(t, strings.Join(args[:2], " "), page)
	}
}

// A history file's strings (an intent's label, a key, an answer's text, a
// holder's name) are escaped in check FILE --html's report.
func TestAHistorysMarkupIsEscapedInItsReport(t *testing.T) {
	t.Parallel()
	h := hostileHistory(markup, `{"error":`+strings.TrimSpace(jsonString(markup))+`}`)
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, page := filepath.Join(dir, "h.json"), filepath.Join(dir, "check.html")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, context.Background(), mustNotStart(t), "check", path, "--html", page); r.code != 1 {
		t.Errorf("check of a history that moved money for a refused intent: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	assertEscaped(t, "check --html", page)
}
