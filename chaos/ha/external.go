package ha

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/teamcmd"
	"github.com/banksim/bank-sim/postgres/banks"
)

// ExternalOptions are a run on a team's own server or cluster, reached
// through --database-url (one host or several): what bank-sim watches, and the failover it
// causes or waits for.
type ExternalOptions struct {
	// WatchURL is the URL whose primary the run watches (the
	// maintenance database's: every node has it).
	WatchURL string
	// FailoverCmd, when set, is the team's own failover command, run with
	// sh -c as the seeded intent starts (Config.CrashIntent; in a run of
	// a duration, at Config.CrashAfter), bounded by CmdTimeout.
	FailoverCmd string
	CmdTimeout  time.Duration
	// Expect says that someone else fails the cluster over during the run:
	// healing waits (at most WaitTimeout) until the new primary is seen.
	// A FailoverCmd is waited for the same way.
	Expect      bool
	WaitTimeout time.Duration
}

// outputMax is how much of the command's output a history keeps: its end.
const outputMax = 8 << 10

// RunExternal runs cfg on dbs, a server bank-sim did not start (a
// multi-host cluster, or one address that may lead to one), with a Watcher on
// o.WatchURL for the whole run: every change of primary it sees is in the
// history (History.PrimaryChanges), caused or not. The workload goes on
// through a change (each new connection finds the new primary through the
// URL); with o.FailoverCmd (unless it failed) or o.Expect, the workload
// outlives its plan until a transfer sent after the old primary was lost
// has been acknowledged (at most o.WaitTimeout more: past it, the report
// says why the window is unknown), healing starts only once the change
// has been seen, and a run in which none comes fails.
func RunExternal(ctx context.Context, dbs banks.Databases, cfg chaos.Config, opts chaos.Options, o ExternalOptions) (*chaos.History, error) {
	cfg = cfg.WithDefaults()
	w, err := Watch(ctx, o.WatchURL)
	if err != nil {
		return nil, err
	}
	var (
		start   time.Time
		cmdOnce sync.Once
		cmdDone = make(chan struct{})
		cmdMu   sync.Mutex // cmdRec is written by the command's goroutine
		cmdRec  *chaos.FailoverCommand
		stopped bool
	)
	command := func() *chaos.FailoverCommand {
		cmdMu.Lock()
		defer cmdMu.Unlock()
		return cmdRec
	}
	stop := func() []chaos.PrimaryChange {
		if stopped {
			return nil
		}
		stopped = true
		var cmdStart int64 = -1
		if rec := command(); rec != nil {
			cmdStart = rec.StartNs
		}
		return w.Stop(start, func(seenNs int64) string {
			switch {
			case cmdStart >= 0 && seenNs >= cmdStart:
				return chaos.CauseCommand
			case o.Expect:
				return chaos.CauseExpected
			}
			return chaos.CauseUnannounced
		})
	}
	defer stop()
	runCmd := func(after int) {
		cmdOnce.Do(func() {
			go func() {
				defer close(cmdDone)
				rec := runFailoverCmd(ctx, o.FailoverCmd, o.CmdTimeout, start)
				rec.AfterIntent = after
				cmdMu.Lock()
				cmdRec = &rec
				cmdMu.Unlock()
			}()
		})
	}
	// A failover may leave no writable primary for a while: in
	// synchronous_mode the new primary's commits wait until a standby
	// follows it. The run allows what it allows the failover itself.
	opts.Outages, opts.OutageWait = true, o.WaitTimeout
	began, atIntent, beforeHeal := opts.Began, opts.AtIntent, opts.BeforeHeal
	opts.Began = func(t time.Time) {
		start = t
		if began != nil {
			began(t)
		}
		if o.FailoverCmd != "" && cfg.Intents <= 0 {
			time.AfterFunc(cfg.CrashAfter(), func() { runCmd(-1) })
		}
	}
	if o.FailoverCmd != "" && cfg.Intents > 0 {
		opts.AtIntent = func(ctx context.Context, i int) {
			if i == cfg.CrashIntent() {
				runCmd(i)
			}
			if atIntent != nil {
				atIntent(ctx, i)
			}
		}
	}
	if o.FailoverCmd != "" || o.Expect {
		// A drill: its unavailability is measured only if transfers are
		// sent across the failover. A workload that ends before the
		// failover, or just as it happens, goes on, at most WaitTimeout
		// past its plan, until a transfer sent after the old primary was
		// lost has been acknowledged.
		var (
			planOnce sync.Once
			planEnd  time.Time
		)
		opts.KeepGoing = func(lastAckStartNs int64) bool {
			planOnce.Do(func() { planEnd = time.Now() })
			if o.FailoverCmd != "" {
				runCmd(-1) // a run that ended before its moment: now
				if rec := command(); rec != nil && rec.ExitCode != 0 {
					return false // it may have changed nothing: no failover to wait for
				}
			}
			if lost, seen := w.FirstLost(); seen && lastAckStartNs >= lost.Sub(start).Nanoseconds() {
				return false
			}
			return time.Since(planEnd) < o.WaitTimeout
		}
	}
	opts.BeforeHeal = func(ctx context.Context) error {
		if o.FailoverCmd != "" {
			runCmd(-1) // a run that ended before its intent: now
			select {
			case <-cmdDone:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// A command that failed may have changed nothing: the report says
		// so, and healing does not wait for what will not come.
		failed := false
		if rec := command(); rec != nil {
			failed = rec.ExitCode != 0
		}
		if (o.FailoverCmd != "" && !failed) || o.Expect {
			if err := w.WaitChange(ctx, o.WaitTimeout); err != nil {
				what := "--expect-failover"
				if rec := command(); rec != nil {
					what = "--failover-cmd " + rec.Line()
				}
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		if beforeHeal != nil {
			return beforeHeal(ctx)
		}
		return nil
	}
	h, err := chaos.RunOnWith(ctx, dbs, cfg, opts)
	if err != nil {
		return nil, err
	}
	h.PrimaryChanges = stop()
	first := w.First()
	h.PrimaryWatched = &first
	h.FailoverCommand = command()
	return h, nil
}

// runFailoverCmd runs cmd (see teamcmd) and records it, its times offsets
// from start.
func runFailoverCmd(ctx context.Context, cmd string, timeout time.Duration, start time.Time) chaos.FailoverCommand {
	began := time.Since(start)
	res := teamcmd.Run(ctx, cmd, timeout, outputMax)
	rec := chaos.FailoverCommand{Command: cmd, StartNs: began.Nanoseconds(), EndNs: (began + res.Duration).Nanoseconds(), ExitCode: res.ExitCode, Output: res.Output}
	switch {
	case res.Killed != nil:
		rec.Error = fmt.Sprintf("killed at its timeout, %s", timeout)
	case res.ExitCode < 0 && res.Err != nil:
		rec.Error = res.Err.Error()
	}
	return rec
}
