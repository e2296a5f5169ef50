package hacluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"golang.org/x/sys/unix"
)

// A postmaster that outlived its cluster.
//
// pg_autoctl and patroni start PostgreSQL themselves, so the record
// (record.go) names the postmaster only when bank-sim saw it up (Patroni's,
// once running) or as a descendant of its agent. Kill the agent (SIGKILL
// of the test, whose parent-death signal never reaches a postmaster in a
// session of its own) and the postmaster is reparented, no descendant of
// anything recorded: prune used to remove the directory from under it and
// leave it running. So prune also stops the postmaster named by the
// postmaster.pid of each data directory in a dead cluster's directory, when
// all of this holds, and keeps the directory, saying why, when a
// postgres is named but the proof fails:
//
//   - the directory is one bank-sim made (proven) whose lock is free;
//   - the pid is the first line of postmaster.pid in a directory directly
//     in it (not a symlink), and /proc/PID/exe is a binary named postgres;
//   - the process started after the directory's mark was written (start
//     time from /proc/PID/stat against the mark's ctime, which no one can
//     set back), and within a second of the start time postgres wrote on
//     line 3 of postmaster.pid;
//   - its working directory is that data directory (postgres chdirs
//     there). Never a proof on its own (any process may work there: the
//     bystander bug), it is required besides, because postmaster.pid may be
//     written by the cluster's user (nobody, when root runs it), who could
//     otherwise name another postgres started since, the system's own.
//
// A pid that names no process, or one that is not postgres, is no reason
// to keep the directory: the postmaster that wrote it is gone, the pid
// reused.

// clockTicks is USER_HZ, the unit of /proc/PID/stat's start time: 100 on
// every architecture Linux exposes to user space.
const clockTicks = 100

// clockSlack absorbs the coarseness of the clocks compared: a start time
// in ticks (10 ms), a file time from the kernel's coarse clock (a tick
// behind). A cluster's postmaster starts seconds after its mark (initdb
// comes first), so erring late costs nothing.
const clockSlack = 50 * time.Millisecond

// Postmaster is a PostgreSQL server still running on a data directory of
// a dead cluster, which no process recorded there started: its agent was
// killed and left it running.
type Postmaster struct {
	PID int
	// Node is its data directory's name in the cluster's directory.
	Node  string
	start uint64 // ticks since boot: with PID, this process only
}

// leftoverPostmasters finds the postmasters still running on the data
// directories in dir, a dead cluster's directory bank-sim made, and proves
// each bank-sim's; the error says why dir must be kept instead.
func leftoverPostmasters(dir string) ([]Postmaster, error) {
	fi, err := os.Lstat(filepath.Join(dir, markName))
	if err != nil {
		return nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	made := time.Unix(st.Ctim.Unix())
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var pms []Postmaster
	for _, e := range entries {
		if !e.IsDir() { // a symlink is not followed: it could lead anywhere
			continue
		}
		pm, err := leftoverPostmaster(filepath.Join(dir, e.Name()), made)
		if err != nil {
			return nil, fmt.Errorf("%s/postmaster.pid %w", e.Name(), err)
		}
		if pm.PID != 0 {
			pms = append(pms, pm)
		}
	}
	return pms, nil
}

// leftoverPostmaster is the postmaster running on data, proven bank-sim's
// (see above), or none (PID 0) when nothing runs there; the error
// completes "DATA/postmaster.pid …" with why it cannot be proven.
func leftoverPostmaster(data string, made time.Time) (Postmaster, error) {
	f, err := os.OpenFile(filepath.Join(data, "postmaster.pid"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return Postmaster{}, nil
	}
	if err != nil {
		return Postmaster{}, fmt.Errorf("cannot be read: %v", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 4<<10))
	f.Close()
	if err != nil {
		return Postmaster{}, fmt.Errorf("cannot be read: %v", err)
	}
	lines := strings.Split(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return Postmaster{}, nil // cut short by a kill: no server got that far
	}
	p, ok := procfs.Stat(pid)
	if !ok || p.State == 'Z' {
		return Postmaster{}, nil
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return Postmaster{}, nil // a kernel thread, or gone
	}
	if err != nil {
		return Postmaster{}, fmt.Errorf("names process %d, whose executable cannot be read (%v)", pid, err)
	}
	if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "postgres" {
		return Postmaster{}, nil
	}
	who := fmt.Sprintf("names process %d, a running postgres (%s)", pid, exe)
	started := startedAt(p.StartTime)
	if !started.After(made.Add(clockSlack)) {
		return Postmaster{}, fmt.Errorf("%s started at %s, before the directory was made (%s)", who, stamp(started), stamp(made))
	}
	if len(lines) > 2 {
		if sec, err := strconv.ParseInt(strings.TrimSpace(lines[2]), 10, 64); err == nil {
			// Line 3 is when postgres began, in whole seconds: at most a
			// second before the fork /proc dates, and a little after.
			if d := started.Sub(time.Unix(sec, 0)); d < -time.Second || d >= time.Second+clockSlack {
				return Postmaster{}, fmt.Errorf("%s started at %s, but postmaster.pid says its postmaster started at %s", who, stamp(started), stamp(time.Unix(sec, 0)))
			}
		}
	}
	cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return Postmaster{}, fmt.Errorf("%s whose working directory cannot be read (%v)", who, err)
	}
	if dfi, err := os.Lstat(data); err != nil || !os.SameFile(cwd, dfi) {
		return Postmaster{}, fmt.Errorf("%s working in another directory, not this data directory", who)
	}
	if q, ok := procfs.Stat(pid); !ok || q.StartTime != p.StartTime {
		return Postmaster{}, nil // exited while we looked
	}
	return Postmaster{PID: pid, Node: filepath.Base(data), start: p.StartTime}, nil
}

// startedAt is when a process started, on the wall clock, given its start
// time in ticks since boot.
func startedAt(ticks uint64) time.Time {
	var up unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &up) // the clock /proc dates processes by
	boot := time.Now().Add(-time.Duration(up.Nano()))
	return boot.Add(time.Duration(ticks) * time.Second / clockTicks)
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// stopPostmasters stops the leftover postmasters with SIGQUIT,
// PostgreSQL's immediate shutdown, which stops their children and
// releases their shared memory; what still runs 5 s later is frozen and
// killed like a record's processes.
func stopPostmasters(pms []Postmaster) error {
	var rs []recorded
	for _, pm := range pms {
		rs = append(rs, recorded{pid: pm.PID, start: pm.start})
	}
	pids := recordedProcs(rs)
	for _, pm := range pms {
		if p, ok := procfs.Stat(pm.PID); ok && p.StartTime == pm.start {
			syscall.Kill(pm.PID, syscall.SIGQUIT)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if waitGone(ctx, pids) == nil {
		return nil
	}
	if _, err := killAll(rs); err != nil {
		return errors.New("a postmaster left running in it survived SIGQUIT and SIGKILL; it is kept")
	}
	return nil
}
