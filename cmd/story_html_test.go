package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// runReports runs a scenario command line with --json and returns its
// reports: what the HTML report must show, from the same run.
func runReports(t *testing.T, want int, args ...string) []scenarios.Report {
	t.Helper()
	r := run(t, context.Background(), postgres.Start, append(args, "--json")...)
	if r.code != want {
		t.Fatalf("%v: exit %d, want %d; stderr:\n%s", args, r.code, want, r.stderr)
	}
	var doc struct{ Reports []scenarios.Report }
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v: --json output: %v", args, err)
	}
	return doc.Reports
}

// drawn is what a phase's picture must account for: every event of the
// kinds a sequence diagram draws, and among them the arrows (events
// between two lanes); and the lanes the events name.
func drawn(p scenarios.PhaseReport) (events, arrows int, lanes []string) {
	add := func(l string) {
		if l != "" && !slices.Contains(lanes, l) {
			lanes = append(lanes, l)
		}
	}
	for _, e := range p.Events {
		switch e.Kind {
		case scenarios.KindSend, scenarios.KindArrive, scenarios.KindAnswer, scenarios.KindAttempt, scenarios.KindDatabase:
			events++
			if e.From != "" && e.To != "" {
				arrows++
				add(e.From)
				add(e.To)
			}
		case scenarios.KindServer:
			events++
			add(e.Lane)
			if e.Lane == "" {
				add("server")
			}
		case scenarios.KindFault:
			events++
			add(e.Lane)
		case scenarios.KindStep:
			events++
		}
	}
	return events, arrows, lanes
}

// sumEvents is JavaScript: the events drawn by the rows matching sel.
func sumEvents(sel string) string {
	return fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).reduce(function(n, g){ return n + Number(g.dataset.events) }, 0)`, sel)
}

// The story report is checked against the run's own --json: one diagram
// per phase that accounts for every event and names every lane, the
// balances before and after, and each invariant's verdict in words. A
// story that fails (a --bug) shows the broken invariant marked as a
// failure, and --all's summary links each story to its section.
func TestScenarioHTMLReportInBrowser(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.html"), filepath.Join(dir, "two.html")
	good := runReports(t, cmd.ExitOK, "scenario", "lost-response", "--seed", "3", "--database-url", url, "--html", one)
	bad := runReports(t, cmd.ExitFailed, "scenario", "lost-response", "rules", "--seed", "3", "--database-url", url,
		"--bug", "new-key-per-attempt", "--html", two)

	started := time.Now()
	b := browsertest.New(t)
	t.Logf("browser started in %s", time.Since(started).Round(time.Millisecond))
	p := b.OpenFile(one)
	p.AssertClean()
	r := good[0]
	if got := p.Text("#verdict"); !strings.Contains(got, "✓ PASS") {
		t.Errorf("the page's verdict reads %q, want ✓ PASS", got)
	}
	if n := p.Count("svg.seq"); n != len(r.Phases) {
		t.Errorf("%d diagrams, want one per phase (%d)", n, len(r.Phases))
	}
	for i, ph := range r.Phases {
		at := fmt.Sprintf("#lost-response-phase-%d ", i+1)
		events, arrows, lanes := drawn(ph)
		if got := browsertest.Eval[int](p, sumEvents(at+"svg.seq > g[data-events]")); got != events {
			t.Errorf("phase %d: the diagram draws %d events, the run had %d", i+1, got, events)
		}
		if got := browsertest.Eval[int](p, sumEvents(at+"svg.seq g.msg")); got != arrows {
			t.Errorf("phase %d: the arrows draw %d messages, the run sent %d", i+1, got, arrows)
		}
		shown := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll(`+jsString(at+"g.lane")+`)).map(function(g){ return g.dataset.lane })`)
		for _, l := range lanes {
			if !slices.Contains(shown, l) {
				t.Errorf("phase %d: lane %q of the run is not a participant (participants %v)", i+1, l, shown)
			}
		}
		for _, l := range shown {
			if l != "network" && !slices.Contains(lanes, l) {
				t.Errorf("phase %d: participant %q is in no event of the run", i+1, l)
			}
		}
		// Balances: the lesson's opening bank before, the run's ledger after.
		var wantAfter, wantBefore []string
		for _, a := range ph.Ledger.Accounts {
			wantAfter = append(wantAfter, bank.Naira(a.BalanceKobo))
		}
		for _, a := range bank.LessonAccounts {
			wantBefore = append(wantBefore, bank.Naira(a.BalanceKobo))
		}
		rows := browsertest.Eval[[][]string](p, `Array.from(document.querySelectorAll(`+jsString(at+"table[id$=balances] tbody tr")+
			`)).map(function(r){ return Array.from(r.cells).map(function(c){ return c.innerText }) })`)
		if len(rows) != len(ph.Ledger.Accounts)+1 {
			t.Fatalf("phase %d: %d balance rows, want %d accounts and the total", i+1, len(rows), len(ph.Ledger.Accounts))
		}
		for j, a := range ph.Ledger.Accounts {
			if rows[j][0] != a.Holder || rows[j][2] != wantBefore[j] || rows[j][3] != wantAfter[j] {
				t.Errorf("phase %d: balances row %v, want %s %s → %s", i+1, rows[j], a.Holder, wantBefore[j], wantAfter[j])
			}
		}
		// Each invariant with its verdict in words, not colour alone.
		inv := browsertest.Eval[[][]string](p, `Array.from(document.querySelectorAll(`+jsString(at+"table[id$=invariants] tbody tr")+
			`)).map(function(r){ return [r.cells[0].innerText, r.cells[1].innerText, r.cells[1].className] })`)
		if len(inv) != len(ph.Invariants) {
			t.Fatalf("phase %d: %d invariants shown, the run checked %d", i+1, len(inv), len(ph.Invariants))
		}
		for j, c := range ph.Invariants {
			want := "✓ holds"
			if !c.OK {
				want = "⇒ broken, as this phase sets out to show"
			}
			if inv[j][0] != c.Name || inv[j][1] != want {
				t.Errorf("phase %d: invariant row %v, want %q %q", i+1, inv[j], c.Name, want)
			}
		}
	}

	// The failing run: a summary row per story, linking to its section,
	// and the protected phase's broken invariant marked as a failure.
	q := b.OpenFile(two)
	q.AssertClean()
	if got := q.Text("#verdict"); !strings.Contains(got, "✗") || !strings.Contains(got, "failed") {
		t.Errorf("the run's verdict reads %q", got)
	}
	summary := browsertest.Eval[[][]string](q, `Array.from(document.querySelectorAll('#summary-table tbody tr')).map(function(r){
		var a = r.querySelector('a'); return [a.getAttribute('href'), r.cells[2].innerText, String(!!document.getElementById(a.getAttribute('href').slice(1)))] })`)
	if len(summary) != len(bad) {
		t.Fatalf("summary has %d rows, the run %d stories", len(summary), len(bad))
	}
	for i, r := range bad {
		word := "✓ PASS"
		if !r.Passed {
			word = "✗ FAIL"
		}
		if summary[i][0] != "#"+r.Scenario || summary[i][1] != word || summary[i][2] != "true" {
			t.Errorf("summary row %v, want a link to #%s (which exists) and %q", summary[i], r.Scenario, word)
		}
	}
	failed := 0
	for _, r := range bad {
		for i, ph := range r.Phases {
			at := fmt.Sprintf("#%s-phase-%d ", r.Scenario, i+1)
			if ph.Passed || ph.Control {
				continue
			}
			failed++
			if v := q.Text(at + ".phaseverdict"); !strings.HasPrefix(v, "✗ FAILED") {
				t.Errorf("%s phase %d failed, its verdict reads %q", r.Scenario, i+1, v)
			}
			marked := browsertest.Eval[[]string](q, `Array.from(document.querySelectorAll(`+jsString(at+"table[id$=invariants] td.bad.broken")+
				`)).map(function(td){ return td.parentElement.cells[0].innerText + ': ' + td.innerText })`)
			var want []string
			for _, c := range ph.Invariants {
				if !c.OK {
					want = append(want, c.Name+": ✗ BROKEN")
				}
			}
			if !slices.Equal(marked, want) {
				t.Errorf("%s phase %d: marked broken %v, the run broke %v", r.Scenario, i+1, marked, want)
			}
		}
	}
	if failed == 0 {
		t.Fatalf("with --bug new-key-per-attempt no protected phase failed; the test needs one")
	}
	ms := browsertest.Eval[float64](q, `performance.getEntriesByType('navigation')[0].loadEventEnd`)
	st, _ := os.Stat(two)
	t.Logf("report of %d stories: %d bytes, loaded in %.0f ms", len(bad), st.Size(), ms)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var classroomURL = regexp.MustCompile(`Classroom page: (http://127\.0\.0\.1:\d+/)`)

// startClassroom runs scenario --step --web with the terminal's keys on a
// pipe, and returns the page's address.
func startClassroom(t *testing.T, args ...string) (url string, typist *io.PipeWriter, out, errOut *syncBuffer, done <-chan int) {
	t.Helper()
	keys, typist := io.Pipe()
	t.Cleanup(func() { typist.Close() })
	out, errOut = &syncBuffer{}, &syncBuffer{}
	env := &cmd.Env{
		Stdin: keys, Stdout: out, Stderr: errOut, StdinTerminal: true,
		Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start,
	}
	exit := make(chan int, 1)
	go func() { exit <- cmd.Run(context.Background(), env, append(args, "--step", "--web", "--no-color")) }()
	waitFor(t, errOut, "Classroom page: http://127.0.0.1:", 1, time.Minute, exit)
	return classroomURL.FindStringSubmatch(errOut.String())[1], typist, out, errOut, exit
}

// The classroom page follows --step: it holds where the terminal holds,
// advances from the page (the button, the → key) and from the terminal
// (Enter), shows each phase's verdict as the terminal prints it, and ends
// with the story's verdict and the same diagrams as the story's report.
// The server is gone when the command returns.
func TestClassroomPageFollowsTheStep(t *testing.T) {
	t.Parallel()
	dbURL := sharedServer(t)
	report := filepath.Join(t.TempDir(), "report.html")
	b := browsertest.New(t)
	url, typist, out, errOut, done := startClassroom(t, "scenario", "lost-response", "--seed", "1", "--database-url", dbURL, "--html", report)
	p := b.Open(url)
	holding := func(n int) {
		t.Helper()
		p.WaitFor(fmt.Sprintf(`document.body.dataset.pauses === '%d' && document.body.dataset.waiting === 'true'`, n))
		if got := strings.Count(errOut.String(), prompt); got != n {
			t.Fatalf("the page holds at pause %d, the terminal at %d", n, got)
		}
	}
	arrows := func() int { return p.Count("#stage svg.seq g.msg") }
	holding(1)
	before := arrows()

	// A real mouse click on the button, at its centre (chromedp.Click's
	// DOM query never returns in the harness's tabs).
	xy := browsertest.Eval[[]float64](p, `(function(){ var r = document.getElementById('next').getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2] })()`)
	p.Do(chromedp.MouseClickXY(xy[0], xy[1])) // from the page
	holding(2)
	if arrows() <= before {
		t.Errorf("after Next the diagram did not grow: %d arrows, %d before", arrows(), before)
	}
	v1 := p.Text(`.phase[data-phase="1"] .phaseverdict`)
	if v1 == "" || !strings.Contains(out.String(), v1) {
		t.Errorf("phase 1's verdict on the page %q is not the terminal's:\n%s", v1, out.String())
	}

	if _, err := typist.Write([]byte("\n")); err != nil { // from the terminal
		t.Fatal(err)
	}
	holding(3)
	if n := p.Count(`.phase[data-phase="2"]`); n != 1 {
		t.Errorf("Enter in the terminal did not bring phase 2 to the page")
	}

	p.Do(chromedp.KeyEvent(kb.ArrowRight)) // from the page's keyboard
	holding(4)
	v2 := p.Text(`.phase[data-phase="2"] .phaseverdict`)
	if v2 == "" || !strings.Contains(out.String(), v2) {
		t.Errorf("phase 2's verdict on the page %q is not the terminal's", v2)
	}

	if _, err := typist.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(`document.body.dataset.done === 'true'`)
	if v := p.Text("#verdict"); !strings.HasPrefix(v, "✓ PASS") {
		t.Errorf("the page ends with %q, want the story's ✓ PASS", v)
	}
	select {
	case code := <-done:
		if code != cmd.ExitOK {
			t.Fatalf("exit %d; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after the last key")
	}
	p.AssertClean()
	if c, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), time.Second); err == nil {
		c.Close()
		t.Errorf("the page's server still accepts connections after the run")
	}

	// The page's last picture is the story's: the same arrows per phase as
	// the report written from the same run.
	page := browsertest.Eval[[]int](p, `Array.from(document.querySelectorAll('#stage .phase')).map(function(ph){ return ph.querySelectorAll('g.msg').length })`)
	r := b.OpenFile(report)
	written := browsertest.Eval[[]int](r, `Array.from(document.querySelectorAll('.phase')).map(function(ph){ return ph.querySelectorAll('g.msg').length })`)
	if !slices.Equal(page, written) || len(page) != 2 {
		t.Errorf("arrows per phase: the page %v, the report %v", page, written)
	}
}

// q in the terminal stops a --web run as it stops --step: exit 130, and
// the page's server closed. The server answers only as 127.0.0.1.
func TestClassroomStopsAtQ(t *testing.T) {
	t.Parallel()
	url, typist, _, errOut, done := startClassroom(t, "scenario", "lost-response", "--seed", "1")
	waitFor(t, errOut, prompt, 1, 2*time.Minute, done)
	req, _ := http.NewRequest("GET", url+"state?after=0", nil)
	req.Host = "bank-sim.example:80"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("a request for another host: %v %v, want 421", resp, err)
	}
	resp, err := http.Get(url + "state?after=0")
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Waiting bool }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if !s.Waiting {
		t.Errorf("the state does not say the story holds")
	}
	if _, err := typist.Write([]byte("q\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != cmd.ExitInterrupted {
			t.Fatalf("exit %d, want %d; stderr:\n%s", code, cmd.ExitInterrupted, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30 s after q")
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("the page's server still answers after q")
	}
}

// Ctrl-C on a real terminal stops a --web run as it stops --step: exit
// 130 at once and PostgreSQL stopped (quitsAtOnce), even while a page holds
// a request for news, which is answered with the run's end.
func TestClassroomStopsOnSIGINT(t *testing.T) {
	t.Parallel()
	c, _, out, exited := runOnTTY(t, "scenario", "lost-response", "--step", "--web", "--seed", "1", "--no-color")
	waitFor(t, out, prompt, 1, 2*time.Minute, exited)
	m := classroomURL.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no classroom page announced:\n%s", out.String())
	}
	type state struct {
		Version int
		Done    bool
		Status  string
	}
	get := func(after int) (state, error) {
		var s state
		resp, err := http.Get(fmt.Sprintf("%sstate?after=%d", m[1], after))
		if err != nil {
			return s, err
		}
		defer resp.Body.Close()
		return s, json.NewDecoder(resp.Body).Decode(&s)
	}
	now, err := get(0)
	if err != nil {
		t.Fatal(err)
	}
	// A page: it asks for news, is held until there is some, and asks
	// again, until the run is over.
	held := make(chan state, 1)
	go func() {
		s := now
		for !s.Done {
			var err error
			if s, err = get(s.Version); err != nil {
				t.Errorf("the watching page's request: %v", err)
				break
			}
		}
		held <- s
	}()
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	quitsAtOnce(t, "SIGINT", out, exited)
	select {
	case s := <-held:
		if !s.Done || !strings.Contains(s.Status, "stopped") {
			t.Errorf("the watching page was told %+v, want the run's end (done, stopped)", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the watching page's request was not answered 10 s after bank-sim exited")
	}
}
