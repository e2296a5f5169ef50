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
	failed := 0
	for _, a := range v.attempts {
		if a.Answer != nil && a.Answer.Status >= 500 {
			failed++
		}
	}
	for _, a := range v.attempts {
		if a.Answer != nil && a.Answer.Status == 409 {
			c.okf("a copy was told 409 while another held the key: the copies overlapped at the server and the key stopped the second")
			break
		}
	}
	if failed > 0 {
		// Not a failure: the retries settle it, and the money checks judge
		// the outcome. But a copy that reached a server error got past the
		// key: seen with copies whose clocks disagree (a live claim taken
		// over, and the late holder rolled back by its fencing token).
		c.evidence("⚠ %d cop%s answered 5xx, where a correct server answers 409 (in progress) or the replay: often a sign that a copy got past the key's claim and then failed, "+
			"as when a claim still being worked on is taken over (servers whose clocks disagree about the lock's expiry) or the claim is not atomic; its retry settled it",
			failed, map[bool]string{true: "ies were", false: "y was"}[failed > 1])
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
