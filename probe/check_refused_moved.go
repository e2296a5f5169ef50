package probe

import (
	"context"
	"fmt"
)

var checkRefusedThenMoved = Check{
	Name:  "refused-then-moved",
	Title: "a transfer refused for want of money, retried with its key after money arrived",
	Proves: "a refusal is the key's final answer, as a transfer is: the retry of a refused intent is told the same refusal, " +
		"even after the balance changed, so a client told \"refused\" never has its money moved by a late retry or a duplicate",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s from %s to %s; a transfer of more than %s holds must stay refused", Kobo(c.Amount+13), c.Payee.Name, c.Payer.Name, c.Payer.Name)
	},
	Run: func(ctx context.Context, c *checkRun) {
		payer, payee := c.cfg.Payer, c.cfg.Payee
		held, ok := c.knownBalance(payer.Account)
		if !ok {
			c.skip("%s's balance is unknown: the target reports none in its answers (--balance-field) and no balance source was given (--balances-url, or --database-url with --balances-sql), so the probe cannot ask for just more than the account holds", payer.Name)
			return
		}
		// Just more than the payer holds: refused now, payable once the
		// payee has sent the check's amount.
		t := c.pay(held + c.amount())
		in := c.intent("more than the balance", payer, t)
		c.saw(c.send(ctx, in, sendOpts{}))
		refusal := c.settled(ctx, in, 0)
		what := fmt.Sprintf("%s of %s from %s's %s", in.Label, Kobo(t.Amount), payer.Name, Kobo(held))
		switch {
		case refusal == nil:
			return
		case refusal.Receipt():
			c.debit(receipt{in, refusal})
			c.acknowledged(in)
			c.failf("%s was made (transfer %s): the account paid more than it held", what, refusal.TransferID)
			return
		case refusal.OK():
			c.maybe = append(c.maybe, in.T)
			c.failf("%s was answered %s: a success for a transfer the account cannot pay", what, refusal)
			return
		}
		c.okf("%s was refused: %s", what, refusal)

		// The money arrives: the same request would now be paid. The
		// payee's balance is not what this check is about: known from
		// answers only, it may miss a transfer of unknown outcome in an
		// earlier check, so its answer here establishes it afresh.
		if c.cfg.Balances == nil {
			c.mu.Lock()
			delete(c.known, payee.Account)
			c.mu.Unlock()
		}
		fund := c.intent("money arrives", payee, Transfer{From: payee.Account, To: payer.Account, Amount: c.amount()})
		if c.first(ctx, fund, sendOpts{}) == nil {
			return
		}
		c.okf("%s now holds enough for the refused transfer", payer.Name)

		c.saw(c.send(ctx, in, sendOpts{}))
		a := c.settled(ctx, in, 0)
		again := fmt.Sprintf("the refused transfer's key, sent again after %s's money arrived", payer.Name)
		switch {
		case a == nil:
		case a.Receipt():
			c.debit(receipt{in, a})
			c.acknowledged(in)
			c.failf("%s made transfer %s of %s: the refusal (%s) was not stored as the key's answer, so a client told \"refused\" had its money moved by a late retry or a duplicate",
				again, a.TransferID, Kobo(t.Amount), refusal)
		case a.OK():
			c.maybe = append(c.maybe, in.T)
			c.failf("%s was answered %s, a success, where the first answer was the refusal %s", again, a, refusal)
		case a.Status != refusal.Status || a.Code != refusal.Code:
			c.failf("%s was answered %s, not the first answer %s: the key's answer changed", again, a, refusal)
		default:
			c.okf("%s was told the same refusal: %s", again, a)
		}
	},
}
