package htmlreport

import (
	"bytes"
	"fmt"
)

// ClassroomState is what the classroom page shows at one moment, as its
// JSON endpoint serves it. Stage is the story so far as HTML (the phases,
// the current one's diagram growing); the page swaps it in whole.
type ClassroomState struct {
	// Version grows with every change; the page asks for anything newer
	// than the version it shows.
	Version int    `json:"version"`
	Stage   string `json:"stage"`
	// Waiting: the story holds until the instructor advances it; Pauses
	// counts the holds so far.
	Waiting bool `json:"waiting"`
	Pauses  int  `json:"pauses"`
	// Done: the run is over (finished or stopped); the page stops asking.
	Done    bool   `json:"done"`
	Verdict string `json:"verdict,omitempty"`
	OK      bool   `json:"ok"`
	Status  string `json:"status"`
}

// ClassroomPage is the page of scenario --step --web: large type for a
// projector, the story's state fetched from the same origin (statePath,
// long-polled with ?after=VERSION) and a Next button (and the space and
// right-arrow keys) that POSTs to nextPath. Everything is inline; the
// policy allows requests to its own origin only.
func ClassroomPage(title, statePath, nextPath string) []byte {
	var b bytes.Buffer
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n")
	b.WriteString("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n")
	script := "\n" + fmt.Sprintf(classroomJS, statePath, nextPath) + "\n"
	b.WriteString(policyMeta(" connect-src 'self';", script))
	fmt.Fprintf(&b, "<title>%s</title>\n<style>\n%s%s%s</style>\n</head>\n", Esc(title), baseCSS, SequenceCSS, classroomCSS)
	fmt.Fprintf(&b, `<body data-report="classroom" data-version="0" data-pauses="0" data-waiting="false" data-done="false">
<header><h1>%s</h1></header>
<main id="stage"><p class="sub">Waiting for bank-sim…</p></main>
<div id="bar" class="noprint">
<button id="next" type="button" disabled>Next ▸</button>
<span id="status" role="status" aria-live="polite">connecting…</span>
</div>
<p id="verdict" class="verdict" hidden></p>
<script>%s</script>
</body>
</html>
`, Esc(title), script)
	return b.Bytes()
}

// The Next bar is fixed to the window's bottom: the page keeps room for it
// (--bar, its height, which the script measures) below the last line and
// when it scrolls the newest part into view, or the phase's verdict, the
// last thing drawn, would lie under it.
const classroomCSS = `
:root { --bar: 5rem; scroll-padding-bottom: calc(var(--bar) + 1rem); }
body { max-width: none; font-size: 22px; padding: 1rem 2rem calc(var(--bar) + 2rem); }
h1 { font-size: 2.2rem; }
h2 { font-size: 1.6rem; }
svg.seq { width: 100%; max-width: 1600px; height: auto; }
.phaseverdict, .balances { font-size: 1.4rem; font-weight: 700; padding: .4rem .8rem; border-left: 6px solid; background: var(--soft); }
.phaseverdict.ok { color: var(--ok); } .phaseverdict.bad { color: var(--bad); } .phaseverdict.warn { color: var(--warn); }
#bar { position: fixed; left: 0; right: 0; bottom: 0; background: var(--bg); border-top: 2px solid var(--line); padding: .6rem 2rem; display: flex; gap: 1.5rem; align-items: center; }
#next { font-size: 1.4rem; padding: .4rem 1.4rem; cursor: pointer; }
#status { color: var(--muted); }
body[data-waiting="true"] #status { color: var(--ink); font-weight: 700; }
#verdict { font-size: 1.8rem; }
`

// The page asks for the next state as soon as it has one: the server holds
// the request until something changes (or a bound passes), so the page is
// as fresh as the terminal without polling fast. After the last state it
// asks no more; on errors it retries a few times, then says so.
const classroomJS = `
(function () {
  var version = 0, failures = 0;
  var body = document.body, stage = document.getElementById('stage');
  var next = document.getElementById('next'), status = document.getElementById('status');
  var verdict = document.getElementById('verdict'), bar = document.getElementById('bar');
  function apply(s) {
    version = s.version;
    stage.innerHTML = s.stage;
    body.dataset.version = String(s.version);
    body.dataset.pauses = String(s.pauses);
    body.dataset.waiting = String(s.waiting);
    body.dataset.done = String(s.done);
    status.textContent = s.status;
    next.disabled = !s.waiting || s.done;
    if (s.verdict) {
      verdict.hidden = false;
      verdict.className = 'verdict ' + (s.ok ? 'ok' : 'bad');
      verdict.textContent = (s.ok ? '✓ ' : '✗ ') + s.verdict;
    }
    fitBar();
    var last = s.done ? verdict : stage.lastElementChild;
    if (last && last.scrollIntoView) { last.scrollIntoView({block: 'end'}); }
  }
  // --bar is the Next bar's height as drawn (its status may wrap): the
  // room kept below the story and left clear by scrollIntoView.
  function fitBar() {
    document.documentElement.style.setProperty('--bar', bar.offsetHeight + 'px');
  }
  window.addEventListener('resize', fitBar);
  function poll() {
    fetch('%s?after=' + version, {cache: 'no-store'})
      .then(function (r) { if (!r.ok) { throw new Error('HTTP ' + r.status); } return r.json(); })
      .then(function (s) { failures = 0; apply(s); if (!s.done) { poll(); } })
      .catch(function () {
        failures++;
        if (failures > 5) { status.textContent = 'lost contact with bank-sim: is it still running?'; next.disabled = true; return; }
        setTimeout(poll, 500 * failures);
      });
  }
  function advance() {
    if (next.disabled) { return; }
    next.disabled = true;
    fetch('%s', {method: 'POST', cache: 'no-store'}).catch(function () {});
  }
  next.addEventListener('click', advance);
  document.addEventListener('keydown', function (e) {
    if (e.key === ' ' || e.key === 'ArrowRight') { e.preventDefault(); advance(); }
  });
  poll();
})();
`
