// Package teamcmd runs a command a team gave bank-sim (a failover with
// patronictl or pg_autoctl, a "systemctl restart api"): with sh -c, in a
// process group of its own that is killed whole at its bound, keeping the
// end of what it printed for the report. A command the team wrote may
// start children that outlive it; killing only sh would leave them
// running, holding its output open and acting on the cluster after the
// run has moved on.
package teamcmd

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Result is how a command ended.
type Result struct {
	// ExitCode is -1 when the command did not exit by itself (it was
	// killed, or could not start: Err says why).
	ExitCode int
	// Killed is why its group was killed: context.DeadlineExceeded at
	// the bound, context.Canceled when the caller gave up; nil when it
	// ended by itself.
	Killed error
	// Err is what exec said when the command did not exit 0 (an
	// *exec.ExitError for a non-zero exit), nil otherwise.
	Err      error
	Duration time.Duration
	// Output is its stdout and stderr together, the last tail bytes.
	Output string
}

// Run runs command with sh -c, bounded by timeout and by ctx, keeping the
// last tail bytes of its output. Its process group (and the group only:
// sh and what it started, never bank-sim) is killed with SIGKILL at the
// bound, and also if bank-sim dies first.
func Run(ctx context.Context, command string, timeout time.Duration, tail int) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "sh", "-c", command)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var killed atomic.Bool
	c.Cancel = func() error {
		killed.Store(true)
		return syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	// A child that left the group may still hold the output open: Run
	// returns this long after the kill whatever it does.
	c.WaitDelay = 2 * time.Second
	out := &tailWriter{max: tail}
	c.Stdout, c.Stderr = out, out
	start := time.Now()
	err := c.Run()
	res := Result{ExitCode: -1, Err: err, Duration: time.Since(start), Output: out.String()}
	var exit *exec.ExitError
	switch {
	case killed.Load():
		res.Killed = ctx.Err()
	case err == nil:
		res.ExitCode = 0
	case errors.As(err, &exit) && exit.Exited():
		res.ExitCode = exit.ExitCode()
	}
	return res
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.buf.String()
}
