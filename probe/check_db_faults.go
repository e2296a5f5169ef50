package probe

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/faults"
)

// dbRounds bounds the commits of one request the db-faults check fails in
// turn: the first, the second, … until a request commits fewer times.
const dbRounds = 3

var checkDBFaults = Check{
	Name:  "db-faults",
	Title: "the target's database connection fails at its commit: cut before it, or its answer lost after it",
	Proves: "a database failure at the commit, either side of it, ends, once healed, as exactly one transfer for the key: " +
		"never a 5xx stored and replayed, never a key left in progress past its lock, never the money moved twice",
	Moves: func(c *Config) string {
		if c.DBListen == "" {
			return "nothing (needs --db-proxy)"
		}
		return fmt.Sprintf("up to %d transfers of %s, one per failed commit", 2*dbRounds, Kobo(c.Amount+15))
	},
	Run: func(ctx context.Context, c *checkRun) {
		if c.db == nil {
			c.skip("no --db-proxy was given, and the probe cannot make a server's database fail otherwise: what a failure at the commit leaves (a 5xx stored as the key's answer, a key blocked, a transfer made twice) went unchecked. " +
				"Give --db-proxy LISTEN=UPSTREAM (like 127.0.0.1:6433=127.0.0.1:5432), point the API's database URL at LISTEN, and --lock-ttl, how long the API holds a key's lock")
			return
		}
		limit := c.cfg.Settle + c.cfg.LockTTL
		ttl := "--lock-ttl " + c.cfg.LockTTL.String()
		if c.cfg.LockTTL == 0 {
			ttl = "--settle (give --lock-ttl if the API's lock lasts longer)"
		}
		anyFired := false
		for _, f := range []faults.DBFault{faults.DBCutBeforeCommit, faults.DBLoseCommitAnswer} {
			for k := 1; k <= dbRounds; k++ {
				in := c.intent(fmt.Sprintf("%s, commit %d", f, k), c.cfg.Payer, c.pay(c.amount()))
				c.db.Arm(f, k)
				a := c.send(ctx, in, sendOpts{})
				fired := c.db.Disarm()
				a.Proxy = fired
				if fired == "" {
					a.Proxy = fmt.Sprintf("the request committed fewer than %d times through the database proxy: nothing was failed", k)
				}
				c.saw(a)
				didFire := fired != ""
				anyFired = anyFired || didFire
				from := len(in.Attempts)
				ans, out := c.settleWithin(ctx, in, 0, limit)
				c.sawAll(in, from)
				what := in.Label
				switch out {
				case Stuck:
					c.failf("%s: every retry with the same key was told 409 (in progress) for %s, past %s: the failure left the key claimed, and the intent cannot complete", what, limit, ttl)
				case Failing:
					msg := fmt.Sprintf("%s: every retry with the same key for %s was answered %d", what, limit, ans.Status)
					if ans.Replayed {
						msg += ", marked as a replay"
					}
					c.failf("%s: a server error was stored as the key's final answer, so a passing database failure became a permanent one and the intent never completes", msg)
				case Silent:
					c.failf("%s: no answer to any retry within %s", what, limit)
				}
				if out != Settled {
					c.maybe = append(c.maybe, in.T)
					break
				}
				rs := in.receipts()
				switch {
				case len(rs) > 1:
					c.failf("%s made %d transfers (%s) for one key: the money moved more than once", what, len(rs), transferIDs(rs))
					for _, r := range rs {
						c.debit(receipt{in, r})
						c.acknowledged(in)
					}
				case len(rs) == 1:
					// The retry's balance must be the known one less one
					// amount: a transfer the failed attempt made, and the
					// retry made again, shows as a drift.
					c.debit(receipt{in, rs[0]})
					c.acknowledged(in)
					if didFire {
						c.okf("%s ended as one transfer: %s", what, rs[0].TransferID)
					}
				case ans.OK():
					c.maybe = append(c.maybe, in.T)
					c.failf("%s was answered %s: a success without a transfer", what, ans)
				default:
					c.okf("%s ended as one refusal: %s", what, ans)
				}
				if !didFire {
					break
				}
			}
		}
		if !anyFired {
			c.unknownf("no COMMIT passed through the database proxy at %s: is the API's database URL pointed at it (and not encrypted: the proxy cannot read TLS; %d encrypted connection(s) seen)?", c.db.Addr(), c.db.Opaque())
		}
		c.needMoney = true
	},
}
