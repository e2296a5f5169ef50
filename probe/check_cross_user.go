package probe

import (
	"context"
	"fmt"
)

var checkCrossUserReplay = Check{
	Name:  "cross-user-replay",
	Title: "another user sends the first user's key and exact body",
	Proves: "a stored answer is given only to the user it was made for: another user who sends the same key and the same body " +
		"is refused access to the account, as with a key of their own, and learns nothing of the first user's transfer",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s from %s; %s's copy of the request must be refused", Kobo(c.Amount+12), c.Payer.Name, c.Payee.Name)
	},
	Run: func(ctx context.Context, c *checkRun) {
		mine := c.intent(c.cfg.Payer.Name, c.cfg.Payer, c.pay(c.amount()))
		first := c.first(ctx, mine, sendOpts{})
		if first == nil {
			return
		}
		// The same key text, the same body, bola's credentials: a server that
		// finds its stored answers by the key text alone replays ada's.
		theirs := &intent{Label: c.check.Name + " " + c.cfg.Payee.Name, User: c.cfg.Payee, Key: mine.Key, T: mine.T}
		c.intents = append(c.intents, theirs)
		c.saw(c.send(ctx, theirs, sendOpts{}))
		a := c.settled(ctx, theirs, 0)
		who := fmt.Sprintf("%s with %s's key and %s's exact body (from %s's account %s)", c.cfg.Payee.Name, c.cfg.Payer.Name, c.cfg.Payer.Name, c.cfg.Payer.Name, c.cfg.Payer.Account)
		switch {
		case a == nil:
		case a.Receipt() && a.TransferID == first.TransferID:
			leak := "transfer " + first.TransferID
			if a.Balance != nil {
				leak += fmt.Sprintf(" and the balance %s of account %s", Kobo(*a.Balance), c.cfg.Payer.Account)
			}
			c.failf("%s was answered with %s's stored answer (%s): it leaks %s, of an account %s may not touch (stored answers are found by the key text alone, not by user)",
				who, c.cfg.Payer.Name, a, leak, c.cfg.Payee.Name)
		case a.Receipt():
			c.debit(receipt{theirs, a})
			c.acknowledged(theirs)
			c.failf("%s made transfer %s: %s moved money out of an account that is not theirs", who, a.TransferID, c.cfg.Payee.Name)
		case a.OK():
			c.failf("%s was answered %s: a success for a request that must be refused", who, a)
		case a.Status == 401 || a.Status == 403 || a.Status == 404:
			c.okf("%s was refused: %s", who, a)
		default:
			// Not one of the refusals of access: it must at least be what a
			// key of bola's own gets for that body, or the answer tells bola
			// something about ada's key.
			fresh := c.intent(c.cfg.Payee.Name+" with a key of their own", c.cfg.Payee, mine.T)
			c.saw(c.send(ctx, fresh, sendOpts{}))
			b := c.settled(ctx, fresh, 0)
			switch {
			case b == nil:
			case b.Receipt():
				c.debit(receipt{fresh, b})
				c.acknowledged(fresh)
				c.failf("%s with a key of their own made transfer %s out of %s's account", c.cfg.Payee.Name, b.TransferID, c.cfg.Payer.Name)
			case b.Status == a.Status && b.Code == a.Code:
				c.okf("%s was answered %s, as a key of %s's own is: nothing of %s's key shows", who, a, c.cfg.Payee.Name, c.cfg.Payer.Name)
			default:
				c.failf("%s was answered %s, but a key of %s's own gets %s for the same body: the answer depends on %s's key, so it tells %s that the key exists (the lesson refuses the account: 404)",
					who, a, c.cfg.Payee.Name, b, c.cfg.Payer.Name, c.cfg.Payee.Name)
			}
		}
		c.saw(c.send(ctx, mine, sendOpts{}))
		c.same(mine, c.settled(ctx, mine, 0), first, fmt.Sprintf("%s's key, sent again by %s", c.cfg.Payer.Name, c.cfg.Payer.Name))
	},
}
