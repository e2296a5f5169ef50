package probe

import (
	"context"
	"fmt"
)

var checkDrain = Check{
	Name:   "drain",
	Title:  "concurrent transfers from one account ask for more than it holds",
	Proves: "the balance check and the debit are one step: concurrent transfers are paid while the money lasts and refused after, no debit is lost and no balance goes below zero",
	Moves: func(c *Config) string {
		return fmt.Sprintf("%d concurrent transfers that together ask for about twice %s's balance: up to the whole balance moves", c.Drain, c.Payer.Name)
	},
	Run: func(ctx context.Context, c *checkRun) {
		payer := c.cfg.Payer
		balance, ok := c.knownBalance(payer.Account)
		if !ok {
			c.skip("%s's balance is unknown: the target reports none in its answers and no balance source was given, so the drain cannot be sized to ask for more than the account holds", payer.Name)
			return
		}
		each := balance / int64(c.cfg.Drain/2)
		if each <= 0 {
			c.skip("%s's balance, %s, is too small to drain in %d transfers", payer.Name, Kobo(balance), c.cfg.Drain)
			return
		}
		payable := balance / each
		c.evidence("%s holds %s: %d transfers of %s each at the same instant, of which %d can be paid", payer.Name, Kobo(balance), c.cfg.Drain, Kobo(each), payable)
		ins := make([]*intent, c.cfg.Drain)
		for i := range ins {
			ins[i] = c.intent(fmt.Sprintf("transfer %d", i+1), payer, c.pay(each))
		}
		v := c.together(ctx, ins)
		for _, a := range v.attempts {
			c.saw(a)
		}
		c.evidence("%s; answers: %s", v.describe(), statuses(v.attempts))
		var batch []receipt
		for _, in := range ins {
			a := c.settled(ctx, in, 0)
			if a == nil {
				continue
			}
			rs := in.receipts()
			if len(rs) > 1 {
				c.failf("%s made %d transfers (%s)", in.Label, len(rs), transferIDs(rs))
			}
			for _, r := range rs {
				batch = append(batch, receipt{in, r})
				c.acknowledged(in)
			}
			if len(rs) == 0 && a.OK() {
				c.failf("%s was answered %s: a success without a transfer", in.Label, a)
			}
		}
		c.debit(batch...)
		paid := int64(len(batch))
		switch {
		case paid > payable:
			c.failf("%d transfers of %s were paid from %s: only %d could be, so %s more was paid out than the account held: it was overdrawn, or debits were lost and the money created from nothing", paid, Kobo(each), Kobo(balance), payable, Kobo(paid*each-payable*each))
		case paid < payable:
			c.okf("%d of the %d payable transfers were paid (the others were refused; no money was lost)", paid, payable)
		default:
			c.okf("%d transfers were paid, as many as the balance covers; the rest were refused", paid)
		}
		c.needMoney = true
	},
}
