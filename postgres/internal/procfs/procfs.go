// Package procfs reads Linux's process table and the unprivileged user, for
// the code that starts PostgreSQL as nobody and must find and stop the
// processes it started: the supervisor (package postgres) and the HA test
// clusters (postgres/hacluster).
package procfs

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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

// IsPostmasterOf reports whether pid is a postgres (or postmaster) running
// on dataDir: a pid file's pid may since have been given to anything.
func IsPostmasterOf(pid int, dataDir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "postgres") && !strings.Contains(filepath.Base(args[0]), "postmaster") {
		return false
	}
	for _, a := range args[1:] {
		if filepath.Clean(a) == filepath.Clean(dataDir) {
			return true
		}
	}
	return false
}
