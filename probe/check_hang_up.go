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
		// The moments sweep the time a fresh transfer takes, and a little
		// beyond: early ones cut the server off before or while it claims
		// the key, later ones inside its transaction, the last ones after
		// it. If half the rounds have passed and the server has not once
		// finished before the hang-up, its work takes longer than measured
		// (a loaded machine): the sweep reaches further each round.
		typical := c.typicalLatency()
		span := typical * 3 / 2
		c.evidence("a fresh transfer takes about %s here; over %d rounds the client hangs up from 0 to %s after its request reached the server",
			typical.Round(10*time.Microsecond), rounds, span.Round(10*time.Microsecond))
		hung, late, abandoned := 0, 0, 0
		for i := range rounds {
			if ctx.Err() != nil {
				return
			}
			if i >= rounds/2 && late == 0 {
				span = span * 5 / 4
			}
			after := time.Duration(float64(span) * (float64(i) + c.float()) / float64(rounds))
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
			final, out := c.settle(ctx, in, 0)
			line := fmt.Sprintf("round %d: %s", i+1, saw.describe())
			if saw.hungUp {
				hung++
			} else {
				late++
			}
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
					if final.Replayed {
						late++ // the work was done; only its answer was cut
					}
				}
				c.acknowledged(in)
				line += " · retried: " + answers(in.Attempts[from:])
				if c.caps.Replayed && !final.Replayed && waitedOut(in.Attempts[from:]) {
					abandoned++
				}
				c.evidence("%s", line)
			}
			if len(c.fails) > fails {
				c.evidence("stopped after round %d: the first failure is the evidence", i+1)
				return
			}
		}
		c.evidence("the client hung up before the server answered in %d of %d rounds, after it in %d; the last moment was %s",
			hung, rounds, rounds-hung, span.Round(10*time.Microsecond))
		if abandoned > 0 {
			c.evidence("⚠ in %d round(s) the retry found the key still in progress after its request had ended, and made the transfer itself once the key's lock expired: "+
				"the server left the key claimed when its client went away. Money moved once, but a client less patient than the lock (or than --settle) is left with an unknown outcome", abandoned)
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
