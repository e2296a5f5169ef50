package probe

import (
	"context"
	"fmt"
	"strings"
	"time"
)

var checkRestart = Check{
	Name:  "restart",
	Title: "the server restarts (a redeploy, a crash) between a key's answer and its retry",
	Proves: "keys outlive the server's process: a retry that reaches the server after a restart is recognised " +
		"and answered with the transfer made before it, not made again",
	Moves: func(c *Config) string {
		if c.Restart == nil {
			return "nothing (needs --restart)"
		}
		return "one transfer of " + Kobo(c.Amount+14) + ", and one restart of the target (--restart)"
	},
	Run: func(ctx context.Context, c *checkRun) {
		if c.cfg.Restart == nil {
			c.skip("no --restart command was given, and the probe cannot restart a server it does not own: whether keys survive a redeploy or a crash went unchecked. " +
				"Give --restart CMD (for example 'systemctl restart api' or 'docker restart api'; run with sh -c) and --wait-for, how long the target may take to answer again")
			return
		}
		in := c.intent("before the restart", c.cfg.Payer, c.pay(c.amount()))
		first := c.first(ctx, in, sendOpts{})
		if first == nil {
			return
		}
		start := time.Now()
		out, err := c.cfg.Restart(ctx)
		took := time.Since(start).Round(time.Millisecond)
		if out != "" {
			c.evidence("--restart printed: %s", lastLines(out, 5))
		}
		if err != nil {
			c.unknownf("the restart did not happen as asked (%v, after %s): nothing can be said of keys across a restart", err, took)
			return
		}
		c.evidence("--restart %q ran in %s", c.cfg.RestartCommand, took)
		waited, err := c.ready(ctx)
		if err != nil {
			c.unknownf("%v: the retry was not sent", err)
			return
		}
		c.evidence("the target answered again %s after the restart", waited.Round(time.Millisecond))
		c.saw(c.send(ctx, in, sendOpts{}))
		c.same(in, c.settled(ctx, in, 0), first, "the retry after the restart")
	},
}

// lastLines is the last n lines of s, joined with " ⏎ ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, " ⏎ ")
}
