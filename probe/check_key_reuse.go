package probe

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/probe/judge"
)

var checkReusedAmount = Check{
	Name:   "key-reused-amount",
	Title:  "a buggy client reuses a key for a different amount",
	Proves: "the server compares each request with the one its key was first used for (a fingerprint) and refuses a different one, instead of replaying an answer for another transfer",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s; the second request (%s) must be refused", Kobo(c.Amount+6), Kobo(2*(c.Amount+6)+1))
	},
	Run: func(ctx context.Context, c *checkRun) {
		t := c.pay(c.amount())
		other := t
		other.Amount = 2*t.Amount + 1
		reused(ctx, c, other, fmt.Sprintf("the same key for %s instead of %s", Kobo(other.Amount), Kobo(t.Amount)))
	},
}

var checkReusedRecipient = Check{
	Name:   "key-reused-recipient",
	Title:  "a buggy client reuses a key for another recipient",
	Proves: "a key belongs to one request: the same key with another recipient is refused, not replayed as if the money had gone there",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s; the second request (to account %s) must be refused", Kobo(c.Amount+7), c.Third.Account)
	},
	Run: func(ctx context.Context, c *checkRun) {
		other := c.pay(c.amount())
		other.To = c.cfg.Third.Account
		reused(ctx, c, other, fmt.Sprintf("the same key to account %s instead of %s", other.To, c.cfg.Payee.Account))
	},
}

// reused makes a transfer, then sends other with the same key: it must be
// refused as a reused key (judge.KeyRefusal: the lesson's 422, or the
// target's own --key-refusal), and the key must still answer the first.
func reused(ctx context.Context, c *checkRun, other Transfer, what string) {
	in := c.intent("first use", c.cfg.Payer, c.pay(c.amount()))
	first := c.first(ctx, in, sendOpts{})
	if first == nil {
		return
	}
	misuse := &intent{Label: c.check.Name + " reuse", User: c.cfg.Payer, Key: in.Key, T: other}
	c.intents = append(c.intents, misuse)
	c.saw(c.send(ctx, misuse, sendOpts{}))
	a := c.settled(ctx, misuse, 0)
	switch {
	case a == nil:
	case a.Receipt() && a.TransferID == first.TransferID:
		c.failf("%s was answered with the first request's transfer %s: the client is told that a transfer it did not make succeeded (the request fingerprint is ignored)", what, first.TransferID)
	case a.Receipt():
		c.debit(receipt{misuse, a})
		c.acknowledged(misuse)
		c.failf("%s made a second transfer, %s, under a key already used: the key was not checked against its request", what, a.TransferID)
	case a.OK():
		c.failf("%s was answered %s: a success for a request that must be refused", what, a)
	case a.Class == judge.KeyRefusal:
		c.okf("%s was refused as a reused key: %s", what, a)
	default:
		// Nothing moved, but a refusal of the request itself (its amount,
		// its recipient) would say the same: the key's check is not seen.
		c.unknownf("%s was answered %s: %s", what, a, c.cfg.Contract.Judge().Unrecognised(a.Status, a.Code))
	}
	c.saw(c.send(ctx, in, sendOpts{}))
	c.same(in, c.settled(ctx, in, 0), first, "the first request, sent again with its key")
	c.witness(ctx)
}
