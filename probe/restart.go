package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
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
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = time.Second
		var out tailBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			err = fmt.Errorf("%q did not finish within --restart-timeout %s, and was killed", command, timeout)
		case err != nil:
			err = fmt.Errorf("%q failed: %v", command, err)
		}
		return out.String(), err
	}
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - 4096; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.buf.String())
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
