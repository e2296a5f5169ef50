package cmd

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/banksim/bank-sim/internal/termtext"
)

// pacer is --step and --pace: it holds the story at each step and at each
// phase's verdict until the instructor presses a key, and/or slows every
// line down. q (or Ctrl-C) ends the run at once.
type pacer struct {
	ctx  context.Context
	quit context.CancelFunc // ends the run, as Ctrl-C does
	pace time.Duration      // after every line; 0: none
	keys <-chan byte        // nil without --step
	// prompt is where the prompt goes (stderr, so that a piped stdout stays
	// clean); erase says whether it is a terminal on which the prompt can
	// be wiped once answered.
	prompt io.Writer
	erase  bool
	p      *palette
	// waiting, when set, is told when a pause starts (true) and ends
	// (false): --web shows it on the page.
	waiting func(bool)

	mu      sync.Mutex
	stopped bool // q, or no more input: no more pauses
	quitted bool // q

	// heldMu guards what the story's clock leaves out (held): pause keeps
	// mu for its whole wait.
	heldMu    sync.Mutex
	heldTotal time.Duration // pauses and --pace waits that have ended
	holding   time.Time     // when the current one began; zero if none
	// now is the clock held is measured on; time.Now when nil (a test's
	// fake clock shows held stops growing without waiting for it to).
	now func() time.Time
}

func (pc *pacer) clock() time.Time {
	if pc.now != nil {
		return pc.now()
	}
	return time.Now()
}

// hold marks the start (true) or end (false) of a wait the story's clock
// leaves out.
func (pc *pacer) hold(on bool) {
	pc.heldMu.Lock()
	defer pc.heldMu.Unlock()
	switch {
	case on:
		pc.holding = pc.clock()
	case !pc.holding.IsZero():
		pc.heldTotal += pc.clock().Sub(pc.holding)
		pc.holding = time.Time{}
	}
}

// held is how long the story has been held so far, the current wait
// included: Options.Held. A nil pacer held nothing.
func (pc *pacer) held() time.Duration {
	if pc == nil {
		return 0
	}
	pc.heldMu.Lock()
	defer pc.heldMu.Unlock()
	d := pc.heldTotal
	if !pc.holding.IsZero() {
		d += pc.clock().Sub(pc.holding)
	}
	return d
}

// line slows the story down after each line (--pace).
func (pc *pacer) line() {
	if pc.pace <= 0 {
		return
	}
	pc.hold(true)
	defer pc.hold(false)
	select {
	case <-pc.ctx.Done():
	case <-time.After(pc.pace):
	}
}

// pause waits for a key: q quits, anything else goes on. It returns at
// once when the run is interrupted.
func (pc *pacer) pause() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.keys == nil || pc.stopped || pc.ctx.Err() != nil {
		return
	}
	fmt.Fprint(pc.prompt, pc.p.dim.Sprint("   ── Enter: next · q: quit ──"))
	if pc.waiting != nil {
		pc.waiting(true)
	}
	var k byte
	var ok bool
	pc.hold(true)
	select {
	case <-pc.ctx.Done():
	case k, ok = <-pc.keys:
	}
	pc.hold(false)
	if pc.waiting != nil {
		pc.waiting(false)
	}
	if pc.erase {
		fmt.Fprint(termtext.Raw(pc.prompt), "\r\033[K")
	} else {
		fmt.Fprintln(pc.prompt)
	}
	switch {
	case pc.ctx.Err() != nil:
	case !ok:
		// No more input (EOF): the rest runs without pauses.
		pc.stopped = true
	case k == 'q' || k == 'Q' || k == 3 || k == 4:
		pc.stopped, pc.quitted = true, true
		pc.quit()
	}
}

// quitted reports whether the instructor pressed q.
func (pc *pacer) quitWasPressed() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.quitted
}

// readKeys reads r a byte at a time until it ends or ctx does. In line
// mode (a terminal that could not be switched to single keys, or a script)
// a line of input ("q\n", "\n") counts as one key.
func readKeys(ctx context.Context, r io.Reader, lineMode bool) <-chan byte {
	keys := make(chan byte)
	go func() {
		defer close(keys)
		buf := make([]byte, 1)
		pending := false // inside a line whose key was sent
		for {
			n, err := r.Read(buf)
			if n == 1 {
				b := buf[0]
				if lineMode && (b == '\n' || b == '\r') {
					if pending {
						pending = false
						continue
					}
				} else {
					pending = true
				}
				select {
				case keys <- b:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return keys
}
