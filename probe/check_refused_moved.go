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
		s := fmt.Sprintf("one transfer of %s from %s to %s; a transfer of more than %s holds must stay refused (if it moves, as much is sent back)", Kobo(c.Amount+13), c.Payee.Name, c.Payer.Name, c.Payer.Name)
		if c.ClosedAccount != "" {
			s += fmt.Sprintf("; one to the closed account %s must stay refused after it reopens (--reopen-cmd)", c.ClosedAccount)
		}
		return s
	},
	Run: func(ctx context.Context, c *checkRun) {
		// The closed recipient first: a target that fails the other case
		// leaves the payer too poor for this one.
		if c.cfg.ClosedAccount != "" {
			c.closedThenReopened(ctx)
		}
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
		if c.refusalKept(in, c.settled(ctx, in, 0), refusal, fmt.Sprintf("the refused transfer's key, sent again after %s's money arrived", payer.Name)) {
			// It took all of the payer's money: sent back, so that the
			// later checks (the restart's, the drain's) find the balance
			// they expect, not this defect again.
			back := c.intent("the wrongly moved money sent back", payee, Transfer{From: payee.Account, To: payer.Account, Amount: in.T.Amount})
			if c.first(ctx, back, sendOpts{}) != nil {
				c.okf("%s was sent back to %s for the checks after this one", Kobo(in.T.Amount), payer.Name)
			}
		}
	},
}

// closedThenReopened is the refusal's other case: a transfer to the account
// the team closed (--closed-account) is refused, the account is reopened
// (--reopen-cmd), and the refusal's key is sent again.
func (c *checkRun) closedThenReopened(ctx context.Context) {
	t := Transfer{From: c.cfg.Payer.Account, To: c.cfg.ClosedAccount, Amount: c.amount()}
	in := c.intent("to the closed account "+string(c.cfg.ClosedAccount), c.cfg.Payer, t)
	c.saw(c.send(ctx, in, sendOpts{}))
	refusal := c.settled(ctx, in, 0)
	what := fmt.Sprintf("a transfer of %s to the closed account %s", Kobo(t.Amount), t.To)
	switch {
	case refusal == nil:
		return
	case refusal.Receipt():
		c.debit(receipt{in, refusal})
		c.acknowledged(in)
		c.failf("%s was made (transfer %s): is --closed-account %s closed?", what, refusal.TransferID, t.To)
		return
	case refusal.OK():
		c.maybe = append(c.maybe, in.T)
		c.failf("%s was answered %s: a success for a transfer to a closed account", what, refusal)
		return
	}
	c.okf("%s was refused: %s", what, refusal)
	out, err := c.cfg.Reopen(ctx)
	if out != "" {
		c.evidence("--reopen-cmd printed: %s", lastLines(out, 5))
	}
	if err != nil {
		c.unknownf("the account was not reopened as asked (%v): nothing can be said of the closed recipient's refusal", err)
		return
	}
	c.evidence("--reopen-cmd %q ran: account %s is open", c.cfg.ReopenCommand, t.To)
	c.saw(c.send(ctx, in, sendOpts{}))
	c.refusalKept(in, c.settled(ctx, in, 0), refusal, "the key of the transfer to the closed account, sent again after it reopened")
}

// refusalKept judges a, the answer to a refused intent's key sent again
// after the reason for the refusal went away: it must be the refusal.
func (c *checkRun) refusalKept(in *intent, a, refusal *Answer, again string) (moved bool) {
	switch {
	case a == nil:
	case a.Receipt():
		c.debit(receipt{in, a})
		c.acknowledged(in)
		c.failf("%s made transfer %s of %s: the refusal (%s) was not stored as the key's answer, so a client told \"refused\" had its money moved by a late retry or a duplicate",
			again, a.TransferID, Kobo(in.T.Amount), refusal)
		return true
	case a.OK():
		c.maybe = append(c.maybe, in.T)
		c.failf("%s was answered %s, a success, where the first answer was the refusal %s", again, a, refusal)
	case a.Status != refusal.Status || a.Code != refusal.Code:
		c.failf("%s was answered %s, not the first answer %s: the key's answer changed", again, a, refusal)
	default:
		c.okf("%s was told the same refusal: %s", again, a)
	}
	return false
}
