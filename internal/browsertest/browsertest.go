// Package browsertest opens bank-sim's HTML pages in a real headless
// Chromium for tests, and records what a page must not do: write an error to
// the console, throw, or fetch anything from anywhere but its own origin.
//
// Tests skip (with a message saying how to install one) when no browser is
// found, so the default suite runs on machines without Chromium; .ci/run
// installs Debian's chromium, so CI always runs them.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Bound is how long any one step in the browser may take before the test
// fails: long enough to mean "hung" on a loaded 2-core machine, not "slow".
const Bound = 60 * time.Second

// StartBound is how long the browser may take to start: on a 2-core machine
// under a load of 30 it was seen to take 48 s.
const StartBound = 3 * time.Minute

// Find returns the path of a Chromium-like browser, or "" when there is none.
// BANK_SIM_BROWSER names one explicitly.
func Find() string {
	if p := os.Getenv("BANK_SIM_BROWSER"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Page is one tab of a headless browser showing one page.
type Page struct {
	t   testing.TB
	ctx context.Context
	// origin is what the page may load from: the file itself for a file://
	// page, the scheme and host for an http:// page.
	origin string

	mu       sync.Mutex
	console  []string
	requests []string
}

// Browser is the test process's headless Chromium; its pages are tabs.
// Starting a browser costs seconds (tens on a loaded machine), so a test
// binary starts one, on first use, and every test opens its pages in it.
type Browser struct {
	t   testing.TB
	ctx context.Context
}

var shared struct {
	mu      sync.Mutex
	ctx     context.Context
	cancels []context.CancelFunc
	dir     string
	err     error
}

// New returns the process's browser for t, starting it on first use, and
// skips t when no browser is found, or when the exhaustive tests were not
// asked for: a browser costs its test binary about 10 s of CPU, a tenth of
// what the default suite may spend, so the default suite keeps each browser
// test's checks of the report's file and the browser's run behind
// BANK_SIM_EXHAUSTIVE=1 (pgtest.Exhaustive), as .ci/run does. A package whose tests use it calls
// Close from TestMain; should the process die first, Chromium dies with it
// (chromedp starts it with a parent-death signal).
func New(t testing.TB) *Browser {
	t.Helper()
	pgtest.Exhaustive(t)
	path := Find()
	if path == "" {
		t.Skip("browser: no chromium found (apt-get install chromium, or set BANK_SIM_BROWSER)")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.ctx == nil && shared.err == nil {
		shared.err = startTrying(path)
	}
	if shared.err != nil {
		t.Fatalf("browsertest: %v", shared.err)
	}
	return &Browser{t: t, ctx: shared.ctx}
}

// startAttempts is how many times a browser that dies as it starts is
// started again: beside another test run (load 11) Chromium died once in
// its first second ("chrome failed to start", crashpad: "no stack
// mapping"). A browser that does not answer within StartBound is not tried
// again.
const startAttempts = 3

// errSlowStart is start's error when the browser did not answer in time.
var errSlowStart = errors.New("did not start within the bound")

func startTrying(path string) error {
	var errs []error
	for range startAttempts {
		err := start(path)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if errors.Is(err, errSlowStart) {
			break
		}
	}
	return errors.Join(errs...)
}

func start(path string) error {
	dir, err := os.MkdirTemp("", "bank-sim-browser-")
	if err != nil {
		return err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		// As root, Chromium refuses to start with its sandbox on.
		chromedp.NoSandbox,
		chromedp.UserDataDir(dir),
		// Nothing leaves the machine, whatever a page asks for: every host
		// but loopback resolves to nothing. The requests are still recorded.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-gpu", true),
		// Chromium leaves its singleton socket's folder in TMPDIR
		// (/tmp/org.chromium.Chromium.*) when it is killed; inside the
		// profile it goes with the profile.
		chromedp.Env("TMPDIR="+dir),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	shared.cancels = []context.CancelFunc{cancel, acancel}
	shared.dir = dir
	// The first Run starts the browser; it must run on ctx itself (a timeout
	// on it would end the browser), so the bound is applied by a watcher.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx) }()
	timer := time.NewTimer(StartBound)
	defer timer.Stop()
	select {
	case err := <-done:
		if err != nil {
			closeLocked()
			return fmt.Errorf("cannot start %s: %v", path, err)
		}
	case <-timer.C:
		closeLocked()
		return fmt.Errorf("%s %w (%s)", path, errSlowStart, StartBound)
	}
	shared.ctx = ctx
	return nil
}

// Close stops the process's browser, if one was started, and removes its
// profile. Call it from TestMain after the tests.
func Close() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	closeLocked()
}

func closeLocked() {
	for _, c := range shared.cancels {
		c()
	}
	shared.cancels = nil
	shared.ctx = nil
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
		shared.dir = ""
	}
}

// Open loads u (an http:// URL on loopback, or a file:// URL) in a new tab
// and waits until its body is ready.
func (b *Browser) Open(u string) *Page {
	t := b.t
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("browsertest: bad URL %q: %v", u, err)
	}
	origin := u
	if pu.Scheme == "http" || pu.Scheme == "https" {
		if h := pu.Hostname(); h != "127.0.0.1" && h != "localhost" && h != "::1" {
			t.Fatalf("browsertest: %s is not on loopback; tests only open their own pages", u)
		}
		origin = pu.Scheme + "://" + pu.Host + "/"
	}
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	p := &Page{t: t, ctx: ctx, origin: origin}
	if err := chromedp.Listen(ctx, p.record); err != nil {
		t.Fatalf("browsertest: cannot open a tab: %v", err)
	}
	if err := p.do(chromedp.Navigate(u), chromedp.WaitReady("body")); err != nil {
		t.Fatalf("browsertest: loading %s: %v", u, err)
	}
	return p
}

// OpenFile opens a file written by the code under test in a new tab.
func (b *Browser) OpenFile(path string) *Page {
	b.t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		b.t.Fatal(err)
	}
	return b.Open((&url.URL{Scheme: "file", Path: abs}).String())
}

// record runs on the browser's reading goroutine, so it only appends.
func (p *Page) record(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeAssert {
			var parts []string
			for _, a := range e.Args {
				if a.Value != nil {
					parts = append(parts, string(a.Value))
				} else {
					parts = append(parts, a.Description)
				}
			}
			p.console = append(p.console, "console."+string(e.Type)+": "+strings.Join(parts, " "))
		}
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		p.console = append(p.console, fmt.Sprintf("exception at %d:%d: %s", d.LineNumber, d.ColumnNumber, msg))
	case *log.EventEntryAdded:
		if e.Entry != nil && e.Entry.Level == log.EntryLevelError {
			p.console = append(p.console, "log: "+e.Entry.Text+" "+e.Entry.URL)
		}
	case *network.EventRequestWillBeSent:
		if e.Request != nil {
			p.requests = append(p.requests, e.Request.URL)
		}
	}
}

func (p *Page) do(steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(p.ctx, Bound)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

// Do runs browser actions (clicks, key presses, waits), failing t on error or
// after Bound.
func (p *Page) Do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := p.do(steps...); err != nil {
		p.t.Fatalf("browser: %v", err)
	}
}

// Eval evaluates a JavaScript expression in the page and returns its value.
func Eval[T any](p *Page, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, Bound)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("browser: evaluating %s: %v", expr, err)
	}
	return v
}

// Count returns how many elements match the CSS selector.
func (p *Page) Count(selector string) int {
	p.t.Helper()
	return Eval[int](p, fmt.Sprintf("document.querySelectorAll(%q).length", selector))
}

// Text returns the visible text of the first element matching the selector
// ("" when none does).
func (p *Page) Text(selector string) string {
	p.t.Helper()
	return Eval[string](p, fmt.Sprintf("(function(){var e=document.querySelector(%q);return e?e.innerText:''})()", selector))
}

// WaitFor polls a JavaScript condition until it is true, failing t after
// Bound with what it waited for.
func (p *Page) WaitFor(cond string) {
	p.t.Helper()
	deadline := time.Now().Add(Bound)
	for {
		if Eval[bool](p, "!!("+cond+")") {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("browser: waited %s for %s", Bound, cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Console returns the errors and exceptions the page has produced so far.
func (p *Page) Console() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.console...)
}

// Foreign returns the requests the page made to anything but its own origin
// (data: URLs, which never leave the page, excepted).
func (p *Page) Foreign() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.requests {
		switch {
		case strings.HasPrefix(r, "data:"), strings.HasPrefix(r, "about:"):
		case strings.HasPrefix(p.origin, "file:"):
			if r != p.origin {
				out = append(out, r)
			}
		case !strings.HasPrefix(r, p.origin):
			out = append(out, r)
		}
	}
	return out
}

// AssertClean fails t when the page wrote an error to the console, threw, or
// requested anything outside its own origin.
func (p *Page) AssertClean() {
	p.t.Helper()
	if c := p.Console(); len(c) > 0 {
		p.t.Errorf("the page reported %d error(s):\n  %s", len(c), strings.Join(c, "\n  "))
	}
	if f := p.Foreign(); len(f) > 0 {
		p.t.Errorf("the page requested %d URL(s) outside itself:\n  %s", len(f), strings.Join(f, "\n  "))
	}
}
