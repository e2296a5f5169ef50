package postgres

import (
	"errors"
	"fmt"
	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// postmasterDeathSignal is what the kernel sends the postmaster when its
// supervisor dies, however it dies (SIGKILL included). SIGQUIT is
// PostgreSQL's immediate shutdown: the postmaster tells every backend to
// quit at once, SIGKILLs the ones that do not within 5 s, and exits. No
// checkpoint: the next start replays the WAL, as after a crash.
const postmasterDeathSignal = syscall.SIGQUIT

// postmaster is a PostgreSQL server that the supervisor runs as its own
// direct child, rather than through pg_ctl, which detaches the server (it
// forks, and the postmaster is reparented to init when pg_ctl exits) so that
// nothing ties its life to ours. As our child it carries a parent-death
// signal, which the kernel delivers even when we are SIGKILLed.
type postmaster struct {
	proc *os.Process
	pid  int
	port int
	done chan struct{} // closed once it has exited and been reaped
	err  error         // its exit status, once done
	log  *tailWriter   // the end of its output, for error messages
}

// errPortTaken means another process bound the port between freePort and
// the postmaster's own bind.
var errPortTaken = errors.New("port already in use")

// launchPostmaster starts bin/postgres on data and waits until it accepts
// connections. The supervisor must already be the unprivileged user
// (dropRoot): a parent-death signal is cleared by a change of credentials,
// so the child must not change any after it is set, and the postgres binary
// is not set-user-ID, so exec keeps it.
func launchPostmaster(bin, data string, port int, params map[string]string, logw io.Writer, sigs <-chan os.Signal, timeout time.Duration) (*postmaster, error) {
	args := []string{"-D", data, "-p", strconv.Itoa(port)}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+params[k])
	}
	cmd := exec.Command(filepath.Join(bin, "bin", "postgres"), args...)
	cmd.Dir = filepath.Dir(data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: postmasterDeathSignal}

	// Our own pipe rather than exec's: exec's Wait would also wait for every
	// backend (they inherit the write end) to close it.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	pm := &postmaster{port: port, done: make(chan struct{}), log: &tailWriter{max: 8 << 10}}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(io.MultiWriter(logw, pm.log), r)
		r.Close()
	}()

	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked the
		// child exits, not when the process does, and Go ends a thread
		// whose goroutine returns while locked to it: keep this goroutine,
		// and so its thread, for exactly the postmaster's life.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		pm.err = cmd.Wait()
		close(pm.done)
	}()
	err = <-started
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("running %s: %v", cmd.Path, err)
	}
	pm.proc, pm.pid = cmd.Process, cmd.Process.Pid

	if err := pm.waitReady(data, sigs, timeout); err != nil {
		pm.stop(5 * time.Second)
		// Its output is complete once every process holding the pipe is
		// gone; a moment at most.
		select {
		case <-copied:
		case <-time.After(time.Second):
		}
		if strings.Contains(pm.log.String(), "Address already in use") {
			return nil, errPortTaken
		}
		return nil, fmt.Errorf("%v: %s", err, pm.log.String())
	}
	return pm, nil
}

// waitReady waits until the postmaster has written "ready" into its pid
// file, as pg_ctl -w does: it then accepts connections.
func (pm *postmaster) waitReady(data string, sigs <-chan os.Signal, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-pm.done:
			return fmt.Errorf("postgres exited during startup (%v)", pm.err)
		case <-sigs:
			return errors.New("interrupted while starting PostgreSQL")
		case <-deadline.C:
			return fmt.Errorf("PostgreSQL did not accept connections within %v", timeout)
		case <-tick.C:
			if pidFileReady(data, pm.pid) {
				return nil
			}
		}
	}
}

// pidFileReady reports whether data's postmaster.pid is pid's and says
// "ready" (line 8 since PostgreSQL 10; see pidfile.h).
func pidFileReady(data string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) >= 8 && strings.TrimSpace(lines[0]) == strconv.Itoa(pid) && strings.TrimSpace(lines[7]) == "ready"
}

// stop asks for a fast shutdown (sessions are disconnected, a checkpoint is
// written), then an immediate one, then kills. It returns once the
// postmaster has exited.
func (pm *postmaster) stop(grace time.Duration) error {
	return pm.signalUntilGone(grace, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL)
}

// quit stops the postmaster at once, as `pg_ctl stop -m immediate` does
// (SIGQUIT; SIGKILL after 5 s): no checkpoint, its cluster left as a crash
// leaves it. For a cluster that is never started again as it is: a pair's.
func (pm *postmaster) quit() error {
	return pm.signalUntilGone(5*time.Second, syscall.SIGQUIT, syscall.SIGKILL)
}

// signalUntilGone sends each signal in turn until the postmaster exits,
// waiting grace after the first, 5 s after the next and 10 s after
// SIGKILL. Needing more than the first is an error.
func (pm *postmaster) signalUntilGone(grace time.Duration, sigs ...syscall.Signal) error {
	waits := map[syscall.Signal]time.Duration{syscall.SIGQUIT: 5 * time.Second, syscall.SIGKILL: 10 * time.Second}
	for i, sig := range sigs {
		wait := waits[sig]
		if i == 0 {
			wait = grace
		}
		// Through os.Process, which never signals a pid that Wait has
		// already reaped (and the kernel may have given to another).
		if err := pm.proc.Signal(sig); errors.Is(err, os.ErrProcessDone) {
			<-pm.done
			return nil
		}
		select {
		case <-pm.done:
			if i > 0 {
				return fmt.Errorf("postmaster %d needed %v to stop", pm.pid, sig)
			}
			return nil
		case <-time.After(wait):
		}
	}
	return fmt.Errorf("postmaster %d survived SIGKILL", pm.pid)
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int { return procfs.Children(pid) }

// waitGone waits until none of pids is alive, for at most max.
func waitGone(max time.Duration, pids ...int) bool {
	deadline := time.Now().Add(max)
	for {
		left := false
		for _, p := range pids {
			if procfs.Alive(p) {
				left = true
				break
			}
		}
		if !left {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopStale stops a postmaster that is not our child but still runs on
// dataDir: one that an older bank-sim started through pg_ctl (detached, so
// it survived its supervisor), or ours still in its immediate shutdown when
// the next run takes the slot. Only one proven the postmaster of dataDir
// (procfs.ProvePostmaster) is signalled: a pid file's pid may since have
// been given to anything, and a command line proves nothing. It removes a
// pid file left behind. The error says why a postmaster may still run on
// dataDir (a postgres it names that cannot be proven dataDir's, or one
// that survived SIGKILL): then nothing in dataDir may be removed.
func stopStale(dataDir string) error {
	pidFile := filepath.Join(dataDir, "postmaster.pid")
	// No notBefore: a cache slot has no mark written before its
	// postmaster started (the slot and its cluster serve run after run),
	// so nothing dates it. The executable, line 3 and the working
	// directory still have to hold, and they are what rules out a forged
	// command line or another cluster's postgres.
	pm, err := procfs.ProvePostmaster(dataDir, time.Time{})
	if err != nil {
		return fmt.Errorf("%s %w; it is left running, and the directory kept", pidFile, err)
	}
	if pm.PID != 0 {
		// Same pid, same start time: this process, never one given its
		// pid since.
		same := func() bool {
			p, ok := procfs.Stat(pm.PID)
			return ok && p.StartTime == pm.Start && p.State != 'Z'
		}
		gone := func(max time.Duration) bool {
			deadline := time.Now().Add(max)
			for same() {
				if time.Now().After(deadline) {
					return false
				}
				time.Sleep(10 * time.Millisecond)
			}
			return true
		}
		for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGKILL} {
			if same() {
				syscall.Kill(pm.PID, sig) // SIGQUIT: immediate shutdown, children included
			}
			if gone(3 * time.Second) {
				break
			}
		}
		if same() {
			return fmt.Errorf("%s names postmaster %d, which survived SIGQUIT and SIGKILL; the directory is kept", pidFile, pm.PID)
		}
	}
	// Stopped, or dead already: a leftover pid file only risks "lock file
	// already exists" once the pid is reused.
	os.Remove(pidFile)
	return nil
}

// The process table's questions, answered by procfs for the supervisor, the
// tests and hacluster alike.
var (
	alive          = procfs.Alive
	isPostmasterOf = func(pid int, dataDir string) bool {
		pm, err := procfs.ProvePostmaster(dataDir, time.Time{})
		return err == nil && pid > 0 && pm.PID == pid
	}
	readPidFile = procfs.PIDFile
)
