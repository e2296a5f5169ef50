package htmlreport_test

import (
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/internal/htmlreport"
)

func sample() *htmlreport.Doc {
	d := &htmlreport.Doc{Kind: "test", Title: "Ada → Bola <₦10,000>", Verdict: "2 of 3 held", OK: false, Generator: "bank-sim test"}
	var s htmlreport.SVG
	s.W, s.H, s.Label = 200, 50, "a lane"
	s.Rect(10, 10, 50, 20, "attempt", "attempt 1: 201")
	s.Text(100, 40, "middle", "", "<lane & label>")
	d.Section("pic", "Picture", s.HTML())
	d.Section("tab", "Table", htmlreport.Table{Head: []string{"who", "kobo"}, Rows: [][]htmlreport.Cell{
		{htmlreport.C("Ada"), {Text: "4,000,000", Class: "num"}},
		{htmlreport.C("Bola <b>"), {HTML: htmlreport.Mark(true, "held")}},
	}}.HTML())
	return d
}

func TestRenderEscapesAndStaysSelfContained(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := sample().Render(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Ada → Bola &lt;₦10,000&gt;", "&lt;lane &amp; label&gt;", "Bola &lt;b&gt;", `data-report="test"`, "✗ 2 of 3 held", "✓ held", "default-src 'none'"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	for _, bad := range []string{"<b>", "http://", "https://", "src=\"//"} {
		if strings.Contains(strings.ReplaceAll(out, `xmlns="http://www.w3.org/2000/svg"`, ""), bad) {
			t.Errorf("rendered page contains %q", bad)
		}
	}
}

func TestWriteFileLeavesNoHalfReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := htmlreport.WriteFile(dir, sample()); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("writing to a directory: got %v, want an error saying it is a directory", err)
	}
	missing := filepath.Join(dir, "no", "such", "r.html")
	if err := htmlreport.WriteFile(missing, sample()); err == nil || !strings.Contains(err.Error(), "cannot write in") {
		t.Fatalf("writing into a missing folder: got %v", err)
	}
	p := filepath.Join(dir, "r.html")
	if err := htmlreport.WriteFile(p, sample()); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "r.html" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("folder holds %v, want only r.html (no temporary left)", names)
	}
}

// The harness must catch what it is there to catch, or every browser test
// built on it proves nothing.
func TestBrowserSeesTheReportAndCatchesWhatLeaks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.html")
	if err := htmlreport.WriteFile(good, sample()); err != nil {
		t.Fatal(err)
	}
	b := browsertest.New(t)
	p := b.OpenFile(good)
	p.AssertClean()
	if n := p.Count("section"); n != 2 {
		t.Errorf("sections: got %d, want 2", n)
	}
	if got := p.Text("#verdict"); !strings.Contains(got, "2 of 3 held") {
		t.Errorf("verdict reads %q", got)
	}
	if n := p.Count("svg rect.attempt"); n != 1 {
		t.Errorf("svg rects: got %d, want 1", n)
	}

	// A page that throws and fetches from elsewhere: the harness reports both.
	bad := filepath.Join(dir, "bad.html")
	leaky := `<!DOCTYPE html><html><body><img src="http://192.0.2.1/pixel.png"><script>console.error("boom"); null.x;</script></body></html>`
	if err := os.WriteFile(bad, []byte(leaky), 0o644); err != nil {
		t.Fatal(err)
	}
	q := b.OpenFile(bad)
	q.WaitFor("document.readyState === 'complete'")
	c := strings.Join(q.Console(), "\n")
	if !strings.Contains(c, "boom") || !strings.Contains(c, "exception") {
		t.Errorf("console: got %q, want the console.error and the exception", c)
	}
	if f := q.Foreign(); len(f) != 1 || !strings.Contains(f[0], "192.0.2.1") {
		t.Errorf("foreign requests: got %v, want the one image", f)
	}
	_ = template.HTML("")
}
