// Package procfs reads Linux's process table and the unprivileged user, for
// the code that starts PostgreSQL as nobody and must find and stop the
// processes it started: the supervisor (package postgres) and the HA test
// clusters (postgres/hacluster).
package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Proc is one process, as /proc/PID/stat describes it.
type Proc struct {
	PID, PPID, PGID int
	State           byte
	// StartTime is when the process started, in clock ticks since boot
	// (field 22): with the pid, it names one process for the machine's
	// uptime, where a pid alone is reused.
	StartTime uint64
}

// Scan reads every process in /proc; one that exits meanwhile is left out.
func Scan() []Proc {
	entries, _ := os.ReadDir("/proc")
	var ps []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := Stat(pid); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// Stat reads one process's /proc/PID/stat; false when it is gone.
func Stat(pid int) (Proc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Proc{}, false
	}
	// pid (comm) state ppid pgrp …; comm may hold spaces and parens.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return Proc{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 20 {
		return Proc{}, false
	}
	p := Proc{PID: pid, State: f[0][0]}
	p.PPID, _ = strconv.Atoi(f[1])
	p.PGID, _ = strconv.Atoi(f[2])
	p.StartTime, _ = strconv.ParseUint(f[19], 10, 64)
	return p, true
}

// Children lists the processes whose parent is pid.
func Children(pid int) []int {
	var kids []int
	for _, p := range Scan() {
		if p.PPID == pid {
			kids = append(kids, p.PID)
		}
	}
	return kids
}

// Cmdline is pid's command line with its arguments joined by spaces, or ""
// when it cannot be read.
func Cmdline(pid int) string {
	cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
}

// Nobody returns the uid and gid of the user nobody, or Debian's 65534 when
// the user database does not say.
func Nobody() (uid, gid int) {
	uid, gid = 65534, 65534
	if u, err := user.Lookup("nobody"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	return uid, gid
}

// Alive reports whether pid runs (or is stopped). A zombie counts as dead:
// an orphan reparented to a careless init may never be reaped.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// PIDFile is the pid in dataDir's postmaster.pid, or 0.
func PIDFile(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// Postmaster is a running PostgreSQL server that ProvePostmaster proved
// to be the postmaster of a data directory.
type Postmaster struct {
	PID int
	// Start is its start time in ticks since boot (Proc.StartTime): with
	// the pid, it names this process only, where a pid alone is reused.
	Start uint64
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's start time: 100 on
// every architecture Linux exposes to user space.
const clockTicks = 100

// clockSlack absorbs the coarseness of the clocks compared: a start time
// in ticks (10 ms), a file time from the kernel's coarse clock (a tick
// behind).
const clockSlack = 50 * time.Millisecond

// startupSlack bounds how long a postmaster may take from its fork to the
// start time it writes on line 3 of postmaster.pid.
const startupSlack = 10 * time.Second

// ProvePostmaster finds the postmaster running on dataDir and proves it is
// one before anything may signal it. A command line proves nothing: anyone
// can start a process whose argv names any binary and any directory. So the
// proof is what the kernel says, and what only a postmaster writes:
//
//   - the pid is the first line of dataDir/postmaster.pid (opened without
//     following a symlink), and /proc/PID/exe is a binary named postgres;
//   - the process started within a second after, or startupSlack before,
//     the time postgres wrote on line 3 of postmaster.pid, and after
//     notBefore (unless zero);
//   - its working directory is dataDir, by device and inode (postgres
//     chdirs there). Never a proof on its own (any process may work
//     there), it is required besides, because postmaster.pid may be
//     written by the cluster's user (nobody, when root runs bank-sim),
//     who could otherwise name another postgres, the system's own.
//
// It returns a zero Postmaster and no error when no postmaster runs
// there: no pid file, or one naming no process or one that is not postgres
// (the postmaster that wrote it is gone, its pid reused). The error, which
// completes "DATA/postmaster.pid …", says why a postgres it names cannot be
// proven dataDir's: then one may still run there, so nothing may be
// signalled, nor the directory removed.
func ProvePostmaster(dataDir string, notBefore time.Time) (Postmaster, error) {
	f, err := os.OpenFile(filepath.Join(dataDir, "postmaster.pid"), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
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
		// Cut short by a kill: no server got that far. Negative: a
		// single-user backend's, which dies with its parent.
		return Postmaster{}, nil
	}
	p, ok := Stat(pid)
	if !ok || p.State == 'Z' {
		return Postmaster{}, nil
	}
	// gone: it exited (or became a zombie) while we looked, as a
	// postmaster in its immediate shutdown does; /proc then answers
	// errors that prove nothing either way.
	gone := func() bool {
		q, ok := Stat(pid)
		return !ok || q.State == 'Z' || q.StartTime != p.StartTime
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, fs.ErrNotExist) || err != nil && gone() {
		return Postmaster{}, nil // a kernel thread, or gone
	}
	if errors.Is(err, fs.ErrPermission) && !sameOwner(pid, dataDir) {
		// Another user's process (we are not root): postgres runs only
		// as its data directory's owner.
		return Postmaster{}, nil
	}
	if err != nil {
		return Postmaster{}, fmt.Errorf("names process %d, whose executable cannot be read (%v)", pid, err)
	}
	if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "postgres" {
		return Postmaster{}, nil
	}
	who := fmt.Sprintf("names process %d, a running postgres (%s)", pid, exe)
	started := StartedAt(p.StartTime)
	if !notBefore.IsZero() && !started.After(notBefore.Add(clockSlack)) {
		return Postmaster{}, fmt.Errorf("%s started at %s, before the directory was made (%s)", who, stamp(started), stamp(notBefore))
	}
	var sec int64 = -1
	if len(lines) > 2 {
		sec, err = strconv.ParseInt(strings.TrimSpace(lines[2]), 10, 64)
		if err != nil {
			sec = -1
		}
	}
	if sec < 0 {
		return Postmaster{}, fmt.Errorf("%s, but gives no start time on line 3, as a postmaster writes it", who)
	}
	// Line 3 is when postgres began, in whole seconds (truncated): at most
	// a second before the fork /proc dates, or later by as long as the
	// process took from its fork (pg_ctl's shell, then exec) to that
	// moment, which on a loaded machine can be seconds (startupSlack). A
	// process named by a stale pid file that started after the postmaster
	// did fails the first bound; the second only ever admits a postgres
	// already working in dataDir.
	if d := started.Sub(time.Unix(sec, 0)); d < -startupSlack || d >= time.Second+clockSlack {
		return Postmaster{}, fmt.Errorf("%s started at %s, but postmaster.pid says its postmaster started at %s", who, stamp(started), stamp(time.Unix(sec, 0)))
	}
	cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		if gone() {
			return Postmaster{}, nil
		}
		return Postmaster{}, fmt.Errorf("%s whose working directory cannot be read (%v)", who, err)
	}
	if dfi, err := os.Lstat(dataDir); err != nil || !os.SameFile(cwd, dfi) {
		if gone() {
			return Postmaster{}, nil
		}
		return Postmaster{}, fmt.Errorf("%s working in another directory, not this data directory", who)
	}
	if gone() {
		return Postmaster{}, nil // exited while we looked
	}
	return Postmaster{PID: pid, Start: p.StartTime}, nil
}

// sameOwner reports whether process pid runs as the owner of dir (its
// /proc directory belongs to its effective user).
func sameOwner(pid int, dir string) bool {
	pfi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return true // the caller cannot tell: assume the worst
	}
	dfi, err := os.Lstat(dir)
	if err != nil {
		return true
	}
	return pfi.Sys().(*syscall.Stat_t).Uid == dfi.Sys().(*syscall.Stat_t).Uid
}

// StartedAt is when a process started, on the wall clock, given its start
// time in ticks since boot.
func StartedAt(ticks uint64) time.Time {
	var up unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &up) // the clock /proc dates processes by
	boot := time.Now().Add(-time.Duration(up.Nano()))
	return boot.Add(time.Duration(ticks) * time.Second / clockTicks)
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
