package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/banksim/bank-sim/internal/teamcmd"
)

// Restarter restarts the target between a key's answer and its retry (the
// restart check): a redeploy or a crash, as the team causes it. It returns
// what the restart printed.
type Restarter func(ctx context.Context) (output string, err error)

// ShellRestart is a Restarter that runs command with sh -c (the team's
// "systemctl restart api", "docker restart api", a script), bounded by
// timeout: at the bound its whole process group is killed. Its output,
// stdout and stderr together, is kept (the last 4 KiB) for the report.
func ShellRestart(command string, timeout time.Duration) Restarter {
	return func(ctx context.Context) (string, error) {
		res := teamcmd.Run(ctx, command, timeout, 4<<10)
		var err error
		switch {
		case errors.Is(res.Killed, context.DeadlineExceeded):
			err = fmt.Errorf("%q did not finish within --restart-timeout %s, and was killed", command, timeout)
		case res.Err != nil:
			err = fmt.Errorf("%q failed: %v", command, res.Err)
		}
		return strings.TrimSpace(res.Output), err
	}
}

// ready waits, up to the run's WaitFor, until every copy of the target
// answers HTTP again after a restart.
func (r *run) ready(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(r.cfg.WaitFor)
	for _, ep := range r.eps {
		wait := 10 * time.Millisecond
		for {
			left := time.Until(deadline)
			if left <= 0 {
				return time.Since(start), fmt.Errorf("%s did not answer within --wait-for %s after the restart", ep.URL, r.cfg.WaitFor)
			}
			err := speaksHTTP(ctx, ep, min(left, r.cfg.Timeout))
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return time.Since(start), ctx.Err()
			}
			t := time.NewTimer(min(wait, left))
			select {
			case <-ctx.Done():
				t.Stop()
				return time.Since(start), ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, 500*time.Millisecond)
		}
	}
	return time.Since(start), nil
}
