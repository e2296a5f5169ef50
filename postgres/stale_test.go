package postgres

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
)

// handMadeSlot makes the slot slot-0 of a cache of its own, as a run
// leaves it (a lock file, a data directory), and returns the cache and the
// slot's data directory.
func handMadeSlot(t *testing.T) (cache, data string) {
	t.Helper()
	cache = cacheDir(t)
	slot := filepath.Join(cache, "pg15", "slot-0")
	data = filepath.Join(slot, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(slot, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return cache, data
}

// pidFileLines is a postmaster.pid as PostgreSQL writes it, its first
// three lines: pid, data directory, start time in epoch seconds.
func pidFileLines(pid int, data string, started time.Time) string {
	return fmt.Sprintf("%d\n%s\n%d\n5432\n\n127.0.0.1\n  1234  5678\nready   \n", pid, data, started.Unix())
}

// A hostile local user can start any program with any command line: argv
// saying "postgres" and naming a slot's data directory, working in it,
// named by its postmaster.pid with the right start time. Prune (run as
// root) used to SIGQUIT it on the strength of its argv; only a process
// whose executable is postgres may be signalled.
func TestPruneSparesAProcessThatOnlyLooksLikeAPostmaster(t *testing.T) {
	t.Parallel()
	cache, data := handMadeSlot(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A shell (it outlives its sleep, and takes any arguments) whose argv
	// is "postgres -c … -D DATA DATA".
	forged := &exec.Cmd{Path: sh, Args: []string{"postgres", "-c", "sleep 60; :", "-D", data, data}, Dir: data,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
	if err := forged.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- forged.Wait() }()
	t.Cleanup(func() { syscall.Kill(-forged.Process.Pid, syscall.SIGKILL) })
	pid := forged.Process.Pid
	if err := os.WriteFile(filepath.Join(data, "postmaster.pid"), []byte(pidFileLines(pid, data, time.Now())), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, _, err := PruneCache(cache, false); err != nil {
		t.Fatal(err)
	}
	// No window to wait out: a signal prune sent is, once kill(2) has
	// returned, either still pending or being acted on (the process
	// exiting), and the shell catches none, so any signal would kill it.
	select {
	case err := <-exited:
		t.Fatalf("prune signalled process %d, a shell whose argv only says postgres: %v", pid, err)
	default:
	}
	if why := signalled(t, pid); why != "" {
		t.Fatalf("prune signalled process %d, a shell whose argv only says postgres: %s", pid, why)
	}
}

// signalled says how process pid shows a signal sent to it ("" for none):
// one pending (SigPnd, ShdPnd in /proc/PID/status), or its exit under way
// (PF_EXITING in /proc/PID/stat's flags, or a zombie), which is what a
// fatal signal's delivery leaves once kill(2) has returned.
func signalled(t *testing.T, pid int) string {
	t.Helper()
	const pfExiting = 0x4
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return fmt.Sprintf("it is gone: %v", err)
	}
	// After the command's name (which may hold spaces): state, ppid, pgrp,
	// session, tty, tpgid, flags.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 7 {
		t.Fatalf("/proc/%d/stat: %q", pid, stat)
	}
	var flags uint64
	if _, err := fmt.Sscan(f[6], &flags); err != nil {
		t.Fatalf("/proc/%d/stat flags %q: %v", pid, f[6], err)
	}
	if f[0] == "Z" || f[0] == "X" || flags&pfExiting != 0 {
		return fmt.Sprintf("it is exiting (state %s, flags %#x)", f[0], flags)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Sprintf("it is gone: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":\t")
		if ok && (name == "SigPnd" || name == "ShdPnd") && strings.Trim(mask, "0") != "" {
			return fmt.Sprintf("a signal is pending (%s %s)", name, mask)
		}
	}
	return ""
}

// startDetachedPostmaster starts a server on data through pg_ctl, which
// detaches it (as an older bank-sim did), as nobody when the test runs as
// root, and returns its pid; it is killed when the test ends.
func startDetachedPostmaster(t *testing.T, data string) (pid, port int) {
	t.Helper()
	bin, err := resolveBinaries(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	if os.Geteuid() == 0 {
		args = []string{"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"}
	}
	port, _ = freePort()
	args = append(args, filepath.Join(bin.path, "bin", "pg_ctl"), "start", "-w", "-D", data, "-l", "/dev/null",
		"-o", fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=", port))
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl start: %v: %s", err, out)
	}
	pid = readPidFile(data)
	p, ok := procfs.Stat(pid)
	if pid <= 0 || !ok || !accepts(port) {
		t.Fatalf("no detached postmaster on %s (pid %d)", data, pid)
	}
	t.Cleanup(func() {
		if q, ok := procfs.Stat(pid); ok && q.StartTime == p.StartTime {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid, port
}

// A real postmaster left running in a slot is stopped by prune and its
// cluster removed; but a slot whose postmaster.pid names a postgres that
// works elsewhere (another cluster's, the system's own: the pid file is
// writable by the cluster's user) is neither signalled nor removed, and
// prune says why.
func TestPruneStopsAProvenPostmasterAndKeepsADirItCannotProve(t *testing.T) {
	t.Parallel()
	cache := cacheDir(t)
	s, _ := start(t, Options{CacheDir: cache})
	data := s.dataDir
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pm, port := startDetachedPostmaster(t, data)

	other, otherData := handMadeSlot(t)
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(otherData, "postmaster.pid"), pidFile, 0o600); err != nil {
		t.Fatal(err)
	}
	_, slots, err := PruneCache(other, false)
	if err != nil || len(slots) != 1 {
		t.Fatalf("prune: %v %+v", err, slots)
	}
	if sl := slots[0]; sl.Removed || sl.Err == nil || !strings.Contains(sl.Err.Error(), "another directory") {
		t.Errorf("a slot whose pid file names another cluster's postmaster: %+v", sl)
	}
	if _, err := os.Stat(filepath.Join(otherData, "postmaster.pid")); err != nil {
		t.Errorf("the unproven slot lost its data: %v", err)
	}
	if !alive(pm) || !accepts(port) {
		t.Fatalf("prune of another slot stopped postmaster %d", pm)
	}

	_, slots, err = PruneCache(cache, false)
	if err != nil || len(slots) != 1 || !slots[0].Removed || slots[0].Err != nil {
		t.Fatalf("prune: %v %+v", err, slots)
	}
	waitDead(t, pm, time.Second)
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the pruned slot's data: %v", err)
	}
}

// A slot whose postmaster.pid names a running postgres that cannot be
// proven its postmaster (here one working in another directory) may still
// have a server on its cluster: Start neither signals it nor starts on,
// unpacks over or removes that cluster; it takes the next slot.
func TestStartLeavesASlotWhosePostmasterItCannotProve(t *testing.T) {
	t.Parallel()
	cache, data := handMadeSlot(t)
	// A postgres by name (/proc/PID/exe): a copy of sleep, run as the
	// supervisor's user, so that it can read what the process runs.
	bin := cacheDir(t) // t.TempDir's parent is closed to nobody
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(bin, "postgres")
	if err := os.WriteFile(fake, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: fake, Args: []string{"postgres", "60"}, Dir: "/", SysProcAttr: &syscall.SysProcAttr{}}
	uid, gid := procfs.Nobody()
	if os.Geteuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	pidFile := filepath.Join(data, "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte(pidFileLines(cmd.Process.Pid, data, time.Now())), 0o600); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		// As the supervisor would have left its slot.
		filepath.Walk(filepath.Dir(filepath.Dir(data)), func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, gid) })
	}

	s, _ := start(t, Options{CacheDir: cache})
	if s.slotPath == filepath.Dir(data) {
		t.Errorf("Start took the slot %s, where a postgres it cannot prove may run", s.slotPath)
	}
	if b, err := os.ReadFile(pidFile); err != nil || !strings.HasPrefix(string(b), fmt.Sprint(cmd.Process.Pid)) {
		t.Errorf("the slot's pid file: %v %q", err, b)
	}
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err == nil {
		t.Error("Start put a cluster in the slot it cannot prove")
	}
	select {
	case err := <-exited:
		t.Fatalf("Start signalled the postgres it cannot prove: %v", err)
	default:
	}
}
