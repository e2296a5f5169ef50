package probe

import (
	"context"
	"fmt"
)

var checkDoubleTap = Check{
	Name:   "double-tap",
	Title:  "two copies of one request at the same instant",
	Proves: "of two copies that overlap at the server, one makes the transfer and the other waits for it or is told to retry (409), and its retry gets the same transfer",
	Moves:  func(c *Config) string { return "one transfer of " + Kobo(c.Amount+4) },
	Run:    func(ctx context.Context, c *checkRun) { tap(ctx, c, 2) },
}

var checkStorm = Check{
	Name:   "storm",
	Title:  "a duplicate storm: many copies of one request at the same instant",
	Proves: "however many copies overlap, one intent makes one transfer, and every copy's retry is told that transfer",
	Moves: func(c *Config) string {
		return fmt.Sprintf("one transfer of %s (in %d copies)", Kobo(c.Amount+5), c.Copies)
	},
	Run: func(ctx context.Context, c *checkRun) { tap(ctx, c, c.cfg.Copies) },
}

// tap sends copies of one intent behind a barrier, settles it with the same
// key, and requires one transfer.
func tap(ctx context.Context, c *checkRun, copies int) {
	in := c.intent("tap", c.cfg.Payer, c.pay(c.amount()))
	ins := make([]*intent, copies)
	for i := range ins {
		ins[i] = in
	}
	v := c.together(ctx, ins)
	for _, a := range v.attempts {
		c.saw(a)
	}
	c.evidence("%s; answers: %s", v.describe(), statuses(v.attempts))
	for _, a := range v.attempts {
		if a.Answer != nil && a.Answer.Status == 409 {
			c.okf("a copy was told 409 while another held the key: the copies overlapped at the server and the key stopped the second")
			break
		}
	}
	// Every copy that was not answered for good is retried with the same
	// key, as its client would, until it is.
	var final *Answer
	for i, a := range v.attempts {
		if a.Answer != nil && a.Answer.Settled() {
			final = a.Answer
			continue
		}
		copy := i % len(c.eps)
		c.saw(c.send(ctx, in, sendOpts{copy: copy}))
		if f := c.settled(ctx, in, copy); f != nil {
			final = f
		}
	}
	rs := in.receipts()
	switch {
	case len(rs) > 1:
		var batch []receipt
		for _, r := range rs {
			batch = append(batch, receipt{in, r})
			c.acknowledged(in)
		}
		c.debit(batch...)
		c.failf("%d copies of one request made %d transfers (%s): the money moved %d times for one intent", copies, len(rs), transferIDs(rs), len(rs))
	case len(rs) == 0 && final != nil:
		c.failf("no copy was answered with a transfer: the final answer was %s", final)
	case len(rs) == 1:
		c.debit(receipt{in, rs[0]})
		c.acknowledged(in)
		c.okf("%d copies, one transfer: %s", copies, rs[0].TransferID)
	}
}
