package probe_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/probe"
)

// The probe's HTML report in a real browser, from two real runs against
// bank-sim with a mistake each:
//
//   - jsonb-replay, replays not promised byte for byte: every check passes,
//     and each replay the probe compares gives the same warning (the bytes
//     differ) — said once in the report, linked from each sighting; the
//     hang-up rounds are a strip of marks and a table, not evidence lines;
//   - no-fingerprint: key-reused-amount fails, and is the report's first
//     check, marked, its evidence open.
func TestProbeHTMLReportInABrowser(t *testing.T) {
	t.Parallel()
	jsonb, err := mistakes.Lookup("jsonb-replay")
	if err != nil {
		t.Fatal(err)
	}
	noFingerprint, err := mistakes.Lookup("no-fingerprint")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	sim := startBankSim(t, simOptions{bug: &jsonb})
	cfg := lesson(sim.urls...)
	cfg.Contract.ExactReplays = false // a difference in bytes is then a warning
	cfg.Only = []string{"replay", "lost-response", "hang-up"}
	cfg.HangUps = 4
	warned := runProbe(t, cfg)
	sightings := 0
	for _, c := range warned.Checks {
		if c.Status != probe.Pass {
			t.Fatalf("against jsonb-replay without --exact-replays, %s: %s, want PASS\n%s", c.Name, c.Status, dump(warned))
		}
		for _, e := range c.Evidence {
			if strings.HasPrefix(e, "⚠") {
				sightings++
			}
		}
	}
	if sightings < 3 {
		t.Fatalf("the run gave %d warnings; the test needs the same one several times\n%s", sightings, dump(warned))
	}
	warnedPath := filepath.Join(dir, "warned.html")
	if err := htmlreport.WriteFile(warnedPath, htmlreport.Probe(warned)); err != nil {
		t.Fatal(err)
	}

	sim2 := startBankSim(t, simOptions{bug: &noFingerprint})
	cfg2 := lesson(sim2.urls...)
	cfg2.Only = []string{"replay", "key-reused-amount", "no-key"}
	failed := runProbe(t, cfg2)
	if got := failed.Failures(); len(got) != 1 || got[0] != "key-reused-amount" || failed.Checks[0].Name != "replay" {
		t.Fatalf("against no-fingerprint: failures %v, want key-reused-amount alone (and not first in run order)\n%s", got, dump(failed))
	}
	failedPath := filepath.Join(dir, "failed.html")
	if err := htmlreport.WriteFile(failedPath, htmlreport.Probe(failed)); err != nil {
		t.Fatal(err)
	}

	b := browsertest.New(t)
	p := b.OpenFile(warnedPath)
	p.AssertClean()
	// Each check once in the summary and once with its evidence.
	for _, c := range warned.Checks {
		if n := p.Count(fmt.Sprintf(`#summary tr[data-check=%q]`, c.Name)); n != 1 {
			t.Errorf("summary rows for %s: %d, want 1", c.Name, n)
		}
		if n := p.Count(fmt.Sprintf(`article#check-%s`, c.Name)); n != 1 {
			t.Errorf("evidence blocks for %s: %d, want 1", c.Name, n)
		}
	}
	if n := p.Count("#summary tbody tr"); n != len(warned.Checks) {
		t.Errorf("summary rows: %d, want %d", n, len(warned.Checks))
	}
	// The warning: said once, each sighting linked to it.
	if n := p.Count(".warning"); n != 1 {
		t.Errorf("distinct warnings shown: %d, want 1 (the same warning, seen %d times)", n, sightings)
	}
	shared := "Harmless to a JSON client"
	if n := browsertest.Eval[int](p, fmt.Sprintf(`document.body.innerText.split(%q).length - 1`, shared)); n != 1 {
		t.Errorf("the warning's explanation (%q…) is on the page %d times, want once", shared, n)
	}
	if n := browsertest.Eval[int](p, `Array.from(document.querySelectorAll('article.check a.see-warning')).filter(a => a.getAttribute('href') === '#warning-1').length`); n != sightings {
		t.Errorf("links from the evidence to the warning: %d, want one per sighting (%d)", n, sightings)
	}
	// The hang-up rounds: a mark each, not an evidence line each.
	if n := p.Count("#check-hang-up .strip span"); n != cfg.HangUps {
		t.Errorf("hang-up marks: %d, want %d", n, cfg.HangUps)
	}
	if n := p.Count("#check-hang-up table.rounds tbody tr"); n != cfg.HangUps {
		t.Errorf("hang-up table rows: %d, want %d", n, cfg.HangUps)
	}
	if n := browsertest.Eval[int](p, `Array.from(document.querySelectorAll('#check-hang-up ol.evidence li')).filter(l => /^round \d+:/.test(l.textContent)).length`); n != 0 {
		t.Errorf("%d hang-up round(s) still listed as evidence lines", n)
	}
	if got := p.Text("#verdict"); !strings.HasPrefix(got, "✓") {
		t.Errorf("verdict %q, want ✓ (every check passed)", got)
	}

	q := b.OpenFile(failedPath)
	q.AssertClean()
	if got := browsertest.Eval[string](q, `document.querySelector('#summary tbody tr').dataset.check`); got != "key-reused-amount" {
		t.Errorf("the summary's first check is %q, want the failed key-reused-amount", got)
	}
	if got := q.Text("#summary tbody tr:first-child"); !strings.Contains(got, "✗ FAIL") {
		t.Errorf("the failed check's summary row reads %q, want ✗ FAIL", got)
	}
	if got := browsertest.Eval[string](q, `document.querySelector('article.check').id`); got != "check-key-reused-amount" {
		t.Errorf("the first check with evidence is %q, want the failed one", got)
	}
	if !browsertest.Eval[bool](q, `Array.from(document.querySelectorAll('#check-key-reused-amount ol.evidence li.bad')).some(l => l.checkVisibility())`) {
		t.Errorf("the failed check's ✗ evidence is not visible without a click")
	}
	if got := q.Text("#verdict"); !strings.HasPrefix(got, "✗") || !strings.Contains(got, "key-reused-amount") {
		t.Errorf("verdict %q, want ✗ naming key-reused-amount", got)
	}
}
