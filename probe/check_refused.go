package probe

import (
	"context"
	"fmt"
)

var checkNoKey = Check{
	Name:   "no-key",
	Title:  "a request without an Idempotency-Key",
	Proves: "the key is required (400): a client cannot forget it and only find out in a tunnel, when its retry moves the money again",
	Moves: func(c *Config) string {
		return "nothing (a witness transfer of " + Kobo(c.Amount+9) + " when balances come from answers)"
	},
	Run: func(ctx context.Context, c *checkRun) {
		in := c.intent("no key", c.cfg.Payer, c.pay(c.amount()))
		in.Key = ""
		a := c.send(ctx, in, sendOpts{})
		c.saw(a)
		refused(c, in, a, "a transfer without a key", 400,
			"a transfer without a key was made: its retry after a lost answer cannot be recognised, and moves the money again")
		c.witness(ctx)
	},
}

var checkNoToken = Check{
	Name:   "no-token",
	Title:  "no credentials, a wrong token, someone else's account",
	Proves: "only the account's owner moves its money: without credentials, with a token that is not one, or with another user's token, the transfer is refused and nothing moves",
	Moves: func(c *Config) string {
		return "nothing (a witness transfer of " + Kobo(c.Amount+10) + " when balances come from answers)"
	},
	Run: func(ctx context.Context, c *checkRun) {
		none := c.intent("no credentials", c.cfg.Payer, c.pay(c.amount()))
		none.NoAuth = true
		a := c.send(ctx, none, sendOpts{})
		c.saw(a)
		refused(c, none, a, "a transfer without credentials", 401, "a transfer without credentials was made: anyone can move this account's money")

		wrong := c.intent("wrong token", c.cfg.Payer, c.pay(c.amount()))
		wrong.Token = "probe-not-a-token-" + Key(c.cfg.Seed, "token", 1)[:8]
		a = c.send(ctx, wrong, sendOpts{})
		c.saw(a)
		refused(c, wrong, a, "a transfer with a wrong token", 401, "a transfer with a made-up token was made: anyone can move this account's money")

		stranger := c.intent(c.cfg.Payee.Name+" from "+c.cfg.Payer.Name+"'s account", c.cfg.Payee, c.pay(c.amount()))
		a = c.send(ctx, stranger, sendOpts{})
		c.saw(a)
		refused(c, stranger, a, fmt.Sprintf("%s's token on %s's account", c.cfg.Payee.Name, c.cfg.Payer.Name), 404,
			fmt.Sprintf("%s moved money out of %s's account: the sender's owner is not checked", c.cfg.Payee.Name, c.cfg.Payer.Name))
		c.witness(ctx)
	},
}

// Refusal is what the answer to a request the lesson refuses (a transfer
// without a key: 400; without credentials: 401) says of it. probe's checks
// and chaos --target's no-key rule both judge by JudgeRefusal, so that the
// two never call one answer by different names.
type Refusal int

// The judgments of an answer to a request that must be refused.
const (
	// NotAnswered: no answer came; nothing can be said.
	NotAnswered Refusal = iota
	// Refused: any answer but a success or a server error: nothing was
	// carried out.
	Refused
	// Made: a 2xx that names a transfer: the request was carried out.
	Made
	// Succeeded: a 2xx that names none: a success all the same.
	Succeeded
	// Failed: a 5xx: a server error, not a refusal (the money may have
	// moved).
	Failed
)

// JudgeRefusal judges ans (nil when none came), the answer to a request
// that must be refused.
func JudgeRefusal(ans *Answer) Refusal {
	switch {
	case ans == nil:
		return NotAnswered
	case ans.Receipt():
		return Made
	case ans.OK():
		return Succeeded
	case ans.Status >= 500:
		return Failed
	}
	return Refused
}

// refused judges the answer to a request that must be refused with want
// (JudgeRefusal): a success fails the check (and the transfer is taken
// into the money model), a 5xx fails it, any other refusal passes.
func refused(c *checkRun, in *intent, a *Attempt, what string, want int, success string) {
	ans := a.Answer
	switch JudgeRefusal(ans) {
	case NotAnswered:
		c.failf("%s got no answer: %s", what, a.Error)
	case Made:
		c.debit(receipt{in, ans})
		c.acknowledged(in)
		c.failf("%s", success)
	case Succeeded:
		c.maybe = append(c.maybe, in.T)
		c.failf("%s was answered %s: a success", what, ans)
	case Failed:
		c.maybe = append(c.maybe, in.T)
		c.failf("%s was answered %s: a server error, not a refusal (the lesson: %d)", what, ans, want)
	default:
		if ans.Status == want {
			c.okf("%s was refused: %s", what, ans)
		} else {
			c.okf("%s was refused: %s (the lesson answers %d)", what, ans, want)
		}
	}
}
