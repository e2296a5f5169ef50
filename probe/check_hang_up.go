package probe

import (
	"context"
	"fmt"
	"time"
)

var checkHangUp = Check{
	Name:  "hang-up",
	Title: "the client gives up mid-request, at a different moment each round, and retries with the same key",
	Proves: "wherever in its work the client's connection goes away, the server either finishes or undoes the transfer, never leaves the key blocked, " +
		"and the retry with the same key completes the intent exactly once",
	Moves: func(c *Config) string {
		return fmt.Sprintf("%d transfers of %s, one per round", c.HangUps, Kobo(c.Amount+11))
	},
	Run: func(ctx context.Context, c *checkRun) {
		rounds := c.cfg.HangUps
		// When each round hangs up: see moments.
		m := newMoments(c.typicalLatency(), rounds)
		c.evidence("a fresh transfer takes about %s here; over %d rounds the client hangs up at moments from 0 to the end of the server's work, which the rounds find",
			m.end.Round(10*time.Microsecond), rounds)
		// Of the rounds hung up before any answer: finished, the retry was
		// told a replay (the server did the work after the client left);
		// undone, the retry made the transfer itself (the server dropped the
		// request, or undid its work).
		hung, finished, undone, abandoned := 0, 0, 0, 0
		var outlived time.Duration
		last := time.Duration(0)
		for i := range rounds {
			if ctx.Err() != nil {
				return
			}
			after := m.next(i, c.float())
			last = max(last, after)
			reset := i%2 == 1
			in := c.intent(fmt.Sprintf("round %d", i+1), c.cfg.Payer, c.pay(c.amount()))
			f := newHangUp(c.cfg.Contract, c.eps[0].Addr, after, reset)
			how := "closes"
			if reset {
				how = "resets"
			}
			a := c.send(ctx, in, sendOpts{fault: f, via: fmt.Sprintf("client %s its connection %s after sending", how, after.Round(time.Microsecond))})
			saw, err := waitSaw(f.saw, c.cfg.Timeout+c.cfg.Settle)
			if err != nil {
				c.failf("round %d: %v", i+1, err)
				return
			}
			a.Proxy = saw.describe()
			if saw.err != nil {
				c.saw(a)
				c.failf("round %d: %s", i+1, saw.describe())
				return
			}
			from := len(in.Attempts)
			fails := len(c.fails)
			ended := time.Now()
			final, out := c.settle(ctx, in, 0)
			line := fmt.Sprintf("round %d: %s", i+1, saw.describe())
			if saw.hungUp {
				hung++
				if out == Settled && final.Receipt() && c.caps.Replayed {
					if final.Replayed {
						finished++
					} else {
						undone++
					}
				}
			}
			// The work was done if the answer beat the hang-up, or if the
			// retry was told it is a replay.
			m.learn(i, !saw.hungUp || final != nil && final.Replayed)
			switch {
			case out != Settled:
				c.saw(a)
				c.verdict(in, final, out, from)
			case !final.Receipt():
				c.saw(a)
				c.sawAll(in, from)
				c.failf("round %d: the retry with the same key was answered %s, not a transfer: the client is told its transfer failed, though the server may have made it", i+1, final)
			default:
				if saw.answer != nil && saw.answer.Receipt() {
					c.debit(receipt{in, saw.answer})
					if final.TransferID != saw.answer.TransferID {
						c.debit(receipt{in, final})
						c.acknowledged(in)
						c.failf("round %d: the server made transfer %s before the client hung up, and the retry made another, %s", i+1, saw.answer.TransferID, final.TransferID)
					}
				} else {
					c.debit(receipt{in, final})
				}
				c.acknowledged(in)
				line += " · retried: " + answers(in.Attempts[from:])
				// A retry told 409 long after the request ended, then allowed to
				// make the transfer itself: the claim outlived its request.
				if c.caps.Replayed && !final.Replayed && waitedOut(in.Attempts[from:]) && time.Since(ended) > 10*m.end {
					abandoned++
					outlived = max(outlived, time.Since(ended))
				}
				c.evidence("%s", line)
			}
			if len(c.fails) > fails {
				c.evidence("stopped after round %d: the first failure is the evidence", i+1)
				return
			}
		}
		c.evidence("the client hung up before the server answered in %d of %d rounds, after it in %d", hung, rounds, rounds-hung)
		switch {
		case hung == 0:
		case !c.caps.Replayed:
			c.evidence("whether the server finished the work of a round whose client had left, or undid it, the answers do not say (no %s header)", c.cfg.Contract.ReplayedHeader)
		case undone == 0:
			c.evidence("the server finished the work of every round whose client had left (%d: each retry was told a replay): a hang-up never cut its work short", finished)
		default:
			// The staircase gathers at the boundary between work undone and
			// work done: where a hang-up stops cutting the work short.
			c.evidence("the server finished the work of %d round(s) whose client had left, and in %d made no transfer until the retry (it dropped or undid the work); "+
				"the rounds gathered at about %s after the request, where a hang-up stops cutting the work short", finished, undone, m.end.Round(10*time.Microsecond))
		}
		if abandoned > 0 {
			c.evidence("⚠ in %d round(s) the retry was told 409 (in progress) for up to %s after the request had ended, and then made the transfer itself: "+
				"the server left the key claimed with nobody working on it until the claim expired. Money moved once, but a client less patient than that is left with an unknown outcome",
				abandoned, outlived.Round(time.Millisecond))
		}
		if hung > 0 {
			// A hung-up round's first answer was never seen: only balances
			// can tell whether its work was done twice.
			c.needMoney = true
		}
	},
}

// waitedOut reports whether a retry was told 409 before it was answered for
// good.
func waitedOut(as []*Attempt) bool {
	for _, a := range as {
		if a.Answer != nil && a.Answer.Status == 409 {
			return true
		}
	}
	return false
}

// moments chooses when each round hangs up. The mistakes a hang-up shows
// live at different moments of the server's work: while it claims the key
// (a key left claimed), inside its transaction (a failure stored as the
// answer), and right at its end, between a commit and the next (work done
// twice), a narrow window. Two rounds in three close in on the end of the
// work, as a staircase: later after a round whose work was undone, earlier
// after one whose work was done, the step halving at each turn, so that
// they gather around the end however wrong the first estimate was (a loaded
// machine, a cold first request). The third sweeps from 0 to the end as it
// is known so far, densest near 0. A server that finishes the work of a
// client that has left (bank-sim's, since issue 7) undoes nothing: the
// staircase then steps down to its floor and the rounds hang up in the
// first microseconds after the request, where a claim made on the request's
// context would be cut off.
type moments struct {
	end, step time.Duration
	dir       int
	rounds    int
}

func newMoments(estimate time.Duration, rounds int) *moments {
	return &moments{end: estimate, step: estimate / 4, rounds: rounds}
}

func sweeping(i int) bool { return i%3 == 1 }

// next is round i's moment; u is a uniform draw from the seed.
func (m *moments) next(i int, u float64) time.Duration {
	if !sweeping(i) {
		return max(m.end+time.Duration((u-0.5)*float64(m.step)), 0)
	}
	// Squared, so that the sweep is densest near the start, where the
	// claim of the key is: a short window, early in the work.
	sweeps := (m.rounds + 1) / 3
	f := (float64(i/3) + u) / float64(max(sweeps, 1))
	return time.Duration(float64(m.end) * f * f)
}

// learn takes in whether round i's work was done before its hang-up.
func (m *moments) learn(i int, done bool) {
	if sweeping(i) {
		return
	}
	dir := 1
	if done {
		dir = -1
	}
	if m.dir != 0 && dir != m.dir {
		m.step = max(m.step/2, 20*time.Microsecond)
	}
	m.dir = dir
	m.end = max(m.end+time.Duration(dir)*m.step, 20*time.Microsecond)
}
