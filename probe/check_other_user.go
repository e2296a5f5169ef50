package probe

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/probe/judge"
)

var checkOtherUser = Check{
	Name:   "other-user-same-key",
	Title:  "another user happens to send the same key",
	Proves: "keys are scoped per user: another user's request with the same key text is their own transfer, and each user's key still answers their own",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s from %s and one of %s back from %s", Kobo(c.Amount+8), c.Payer.Name, Kobo(c.Amount+8), c.Payee.Name)
	},
	Run: func(ctx context.Context, c *checkRun) {
		mine := c.intent(c.cfg.Payer.Name, c.cfg.Payer, c.pay(c.amount()))
		first := c.first(ctx, mine, sendOpts{})
		if first == nil {
			return
		}
		theirs := &intent{
			Label: c.check.Name + " " + c.cfg.Payee.Name,
			User:  c.cfg.Payee,
			Key:   mine.Key,
			T:     Transfer{From: c.cfg.Payee.Account, To: c.cfg.Payer.Account, Amount: c.amount()},
		}
		c.intents = append(c.intents, theirs)
		c.saw(c.send(ctx, theirs, sendOpts{}))
		a := c.settled(ctx, theirs, 0)
		who := fmt.Sprintf("%s's own transfer with %s's key text", c.cfg.Payee.Name, c.cfg.Payer.Name)
		switch {
		case a == nil:
		case a.Receipt() && a.TransferID == first.TransferID:
			c.failf("%s was answered with %s's transfer %s: keys are not scoped to the user, so %s learnt %s's answer and their own transfer never happened", who, c.cfg.Payer.Name, first.TransferID, c.cfg.Payee.Name, c.cfg.Payer.Name)
		case a.Receipt():
			c.debit(receipt{theirs, a})
			c.acknowledged(theirs)
			c.okf("%s is a transfer of its own: %s", who, a.TransferID)
		case a.Class == judge.KeyRefusal:
			c.failf("%s was refused as a reused key (%s): keys are shared by all users instead of scoped to each, so one user's key blocks another's transfer", who, a)
		case a.Class == judge.Other:
			c.failf("%s was answered %s, not a transfer (an answer the lesson never gives; if it is this target's refusal of a reused key, --key-refusal %d names it, and keys are then shared by all users)", who, a, a.Status)
		default:
			c.failf("%s was answered %s, not a transfer", who, a)
		}
		c.saw(c.send(ctx, mine, sendOpts{}))
		c.same(mine, c.settled(ctx, mine, 0), first, fmt.Sprintf("%s's key, sent again by %s", c.cfg.Payer.Name, c.cfg.Payer.Name))
	},
}
