package cmd_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/postgres"
)

// compare --html in a real browser: both runs of the story as columns, the
// attempt whose outcome differs marked, the invariants held and broken.
func TestCompareHTMLInABrowser(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "compare.html")
	r := run(t, context.Background(), postgres.Start, "compare", "lost-response", "--seed", "1", "--html", path)
	if r.code != cmd.ExitOK {
		t.Fatalf("compare exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "HTML report: "+path) || strings.Contains(r.stdout, "HTML report") {
		t.Errorf("where the report went should be said on stderr only; stderr:\n%s", r.stderr)
	}
	b := browsertest.New(t)
	p := b.OpenFile(path)
	p.AssertClean()
	if got := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('#runs th.run')).map(h => h.firstChild.textContent)`); strings.Join(got, "|") != "without protection|with protection" {
		t.Errorf("run columns %q, want without protection, with protection", got)
	}
	rows := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('#runs tbody:first-of-type tr')).map(r => r.querySelector('th').textContent + (r.classList.contains('differs') ? ' ≠' : ''))`)
	if strings.Join(rows, "|") != "attempt 1|attempt 2 ≠" {
		t.Errorf("attempt rows %q, want attempt 1 alike in both runs and attempt 2 marked as differing", rows)
	}
	two := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('#runs tbody:first-of-type tr:nth-child(2) td')).map(c => c.innerText)`)
	if len(two) != 2 || !strings.Contains(two[0], "201: transfer 2") || !strings.Contains(two[0], "moved ₦10,000 (transfer 2)") ||
		!strings.Contains(two[1], "201 replayed: transfer 1") || !strings.Contains(two[1], "moved nothing") {
		t.Errorf("attempt 2 reads %q; want a second transfer without protection and the replay with it", two)
	}
	inv := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('#runs tbody.end tr:last-child td')).map(c => c.innerText)`)
	if len(inv) != 2 || !strings.HasPrefix(inv[0], "✗ broke:") || !strings.HasPrefix(inv[1], "✓ all") {
		t.Errorf("invariants read %q, want ✗ broke… then ✓ all … hold", inv)
	}
	if got := p.Text("#verdict"); !strings.HasPrefix(got, "✓ PASS lost-response") {
		t.Errorf("verdict %q", got)
	}
}
