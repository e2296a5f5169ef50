package htmlreport_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/scenarios"
)

// plantedAudit is an audit of every real mistake against every real check,
// as chaos.Audit returns it, with three cells planted: one mistake caught
// by nothing (missedBug), one cell of a caught mistake left uncaught
// (holeBug × holeColumn), and one mistake's chaos run that never reached a
// defence (inconclusiveBug). Each mistake is caught by the checks at
// i, i+3, i+7 (mod the columns), so no two rows look alike.
func plantedAudit() (rep chaos.AuditReport, missedBug, holeBug, holeColumn, inconclusiveBug string) {
	for _, s := range scenarios.List() {
		rep.Columns = append(rep.Columns, s.Name)
	}
	rep.Columns = append(rep.Columns, chaos.ChaosColumn)
	rep.Seed = 424242
	rep.Clean = chaos.AuditRow{Bug: chaos.CleanRow, Caught: map[string]bool{}, Why: map[string]string{}, Seeds: []chaos.Seed{424242, 424243}}
	for _, c := range rep.Columns {
		rep.Clean.Caught[c] = false
	}
	bugs := mistakes.All()
	missedBug, holeBug, inconclusiveBug = bugs[2].Name, bugs[5].Name, bugs[7].Name
	for i, b := range bugs {
		row := chaos.AuditRow{Bug: b.Name, Mistake: b.Mistake, Caught: map[string]bool{}, Why: map[string]string{}, Seeds: []chaos.Seed{424242}}
		for j, c := range rep.Columns {
			k := (j - i + 3*len(rep.Columns)) % len(rep.Columns)
			caught := b.Name != missedBug && (k == 0 || k == 3 || k == 7)
			if caught && c == chaos.ChaosColumn {
				caught = b.Name != inconclusiveBug
			}
			row.Caught[c] = caught
			if caught {
				row.Why[c] = fmt.Sprintf("%s broke under %s: invariant broken", c, b.Name)
			}
		}
		if b.Name == holeBug {
			holeColumn = rep.Columns[(i+3)%len(rep.Columns)]
			row.Caught[holeColumn] = false
			delete(row.Why, holeColumn)
		}
		if b.Name == inconclusiveBug {
			row.Missing = []string{"a wait on a key in progress"}
		}
		rep.Rows = append(rep.Rows, row)
	}
	return rep, missedBug, holeBug, holeColumn, inconclusiveBug
}

// The audit's matrix in a real browser: one row per mistake and one for the
// correct handler, set apart above them; one cell per check; each planted
// state shown by its symbol and word; a cell's evidence opened by a click;
// the totals counted.
func TestAuditMatrixInABrowser(t *testing.T) {
	t.Parallel()
	rep, missedBug, holeBug, holeColumn, inconclusiveBug := plantedAudit()
	caught, total := rep.KillRatio()
	if caught != total-1 {
		t.Fatalf("the planted audit catches %d of %d; want all but %s", caught, total, missedBug)
	}
	path := filepath.Join(t.TempDir(), "audit.html")
	if err := htmlreport.WriteFile(path, htmlreport.Audit(rep)); err != nil {
		t.Fatal(err)
	}
	b := browsertest.New(t)
	p := b.OpenFile(path)
	p.AssertClean()

	if n := p.Count("#matrix thead th.check"); n != len(rep.Columns) {
		t.Errorf("check columns: %d, want %d", n, len(rep.Columns))
	}
	if n := p.Count("#matrix tbody.mistakes tr.mistake"); n != len(rep.Rows) {
		t.Errorf("mistake rows: %d, want %d (one per mistake in the audit)", n, len(rep.Rows))
	}
	if n := p.Count("#matrix tbody.correct tr.correct-row"); n != 1 {
		t.Errorf("correct handler rows: %d, want 1", n)
	}
	// The correct handler's row comes first, in a body of its own.
	if got := browsertest.Eval[string](p, `document.querySelector('#matrix tbody tr[data-bug]').dataset.bug`); got != chaos.CleanRow {
		t.Errorf("first row is %q, want the correct handler's", got)
	}
	if bad := browsertest.Eval[int](p, fmt.Sprintf(`Array.from(document.querySelectorAll('#matrix tr[data-bug]')).filter(r => r.querySelectorAll('td.cell').length !== %d).length`, len(rep.Columns))); bad != 0 {
		t.Errorf("%d row(s) do not have one cell per check", bad)
	}
	// Every cell says its state in a symbol and a word, not in colour alone.
	if bad := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('#matrix td.cell')).filter(c => {
		const s = c.querySelector('.sym'), w = c.querySelector('.word');
		return !s || !w || s.innerText.trim() === '' || w.innerText.trim() !== c.dataset.state; }).map(c => c.title)`); len(bad) > 0 {
		t.Errorf("cells without a symbol and their state's word: %v", bad)
	}

	cell := func(bug, column string) string {
		return fmt.Sprintf(`#matrix tr[data-bug=%q] td[data-column=%q]`, bug, column)
	}
	state := func(bug, column string) string {
		return browsertest.Eval[string](p, fmt.Sprintf(`(document.querySelector(%q)||{dataset:{}}).dataset.state||''`, cell(bug, column)))
	}
	if got, txt := state(holeBug, holeColumn), p.Text(cell(holeBug, holeColumn)); got != htmlreport.CellMissed || !strings.Contains(txt, "·") || !strings.Contains(txt, "missed") {
		t.Errorf("%s × %s (planted: not caught) shows %q %q, want · missed", holeBug, holeColumn, got, txt)
	}
	if got := state(inconclusiveBug, chaos.ChaosColumn); got != htmlreport.CellInconclusive {
		t.Errorf("%s × chaos (planted: a defence never reached) shows %q, want inconclusive", inconclusiveBug, got)
	}
	if got := p.Text(fmt.Sprintf(`#matrix tr[data-bug=%q] td.rowverdict`, missedBug)); !strings.Contains(got, "MISSED") {
		t.Errorf("%s (planted: caught by nothing) has verdict %q, want MISSED", missedBug, got)
	}
	if n := p.Count(fmt.Sprintf(`#matrix tr[data-bug=%q] td.cell[data-state="missed"]`, missedBug)); n != len(rep.Columns) {
		t.Errorf("%s: %d missed cells, want every check's (%d)", missedBug, n, len(rep.Columns))
	}
	if n := p.Count(`#matrix tr.correct-row td.cell[data-state="clean"]`); n != len(rep.Columns) {
		t.Errorf("the correct handler's clean cells: %d, want %d", n, len(rep.Columns))
	}
	want := fmt.Sprintf("%d of %d caught", total-1, total)
	if got := p.Text("#totals"); got != want {
		t.Errorf("totals %q, want %q", got, want)
	}
	if got := p.Text("#verdict"); !strings.Contains(got, want) || !strings.Contains(got, "FAILED") {
		t.Errorf("verdict %q, want %q and FAILED", got, want)
	}

	// A caught cell's evidence opens on a click, and shows the why.
	var c0 string
	for _, c := range rep.Columns {
		if rep.Rows[0].Caught[c] {
			c0 = c
			break
		}
	}
	sel := cell(rep.Rows[0].Bug, c0)
	if vis := browsertest.Eval[bool](p, fmt.Sprintf(`document.querySelector(%q).querySelector('.why').checkVisibility()`, sel)); vis {
		t.Errorf("%s: the evidence shows before a click", sel)
	}
	browsertest.Eval[bool](p, fmt.Sprintf(`(document.querySelector(%q).querySelector('summary').click(), true)`, sel))
	p.WaitFor(fmt.Sprintf(`document.querySelector(%q).querySelector('.why').checkVisibility()`, sel))
	if got, w := p.Text(sel+" .why"), rep.Rows[0].Why[c0]; !strings.Contains(got, w) {
		t.Errorf("%s's evidence reads %q, want %q", sel, got, w)
	}
	p.AssertClean()
}
