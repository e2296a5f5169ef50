package hacluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procInfo is one process as /proc shows it.
type procInfo struct {
	pid, ppid, pgid int
	state           byte
	cmdline         string
}

// scanProcs reads every process in /proc, with its command line.
func scanProcs() []procInfo {
	var ps []procInfo
	for _, p := range procfs.Scan() {
		ps = append(ps, procInfo{pid: p.PID, ppid: p.PPID, pgid: p.PGID, state: p.State, cmdline: procfs.Cmdline(p.PID)})
	}
	return ps
}

// pipeHolders are the live processes with the pipe of inode ino open: a
// pipe the cluster made for one of its runs, so whoever holds it inherited
// it from that run.
func pipeHolders(ino uint64) []int {
	if ino == 0 {
		return nil
	}
	want := "pipe:[" + strconv.FormatUint(ino, 10) + "]"
	var pids []int
	for _, p := range procfs.Scan() {
		if p.PID == os.Getpid() || !procfs.Alive(p.PID) {
			continue
		}
		dir := fmt.Sprintf("/proc/%d/fd", p.PID)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && l == want {
				pids = append(pids, p.PID)
				break
			}
		}
	}
	return pids
}

// waitGone waits until none of pids is alive.
func waitGone(ctx context.Context, pids []int) error {
	for {
		var left []string
		for _, pid := range pids {
			if procfs.Alive(pid) {
				left = append(left, strconv.Itoa(pid))
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %s still alive after SIGKILL: %w", strings.Join(left, " "), context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// memOf is pid's proportional and resident set sizes, in bytes.
func memOf(pid int) (pss, rss int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "Pss":
			pss = n << 10
		case "Rss":
			rss = n << 10
		}
	}
	return pss, rss
}

// tail keeps the last max bytes written, for error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// prefixed writes each line to w with the node's name in front.
func prefixed(w io.Writer, label string) io.Writer {
	return &prefixWriter{w: w, prefix: []byte(label + ": ")}
}

type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	part   []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			break
		}
		line := append(append([]byte{}, p.prefix...), p.part[:i+1]...)
		p.part = p.part[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return len(b), nil
		}
	}
	return len(b), nil
}

// Leftover is the directory of a cluster whose process has ended.
type Leftover struct {
	Dir   string
	Bytes int64
	// Kept says why the directory is left alone, though its lock is
	// free: it is not provably one bank-sim made (record.go).
	Kept error
	// Killed counts the processes still running in it that Prune killed.
	Killed int
	// Postmasters are the PostgreSQL servers still running on its data
	// directories that their killed agents left (postmaster.go): stopped
	// before it is removed, or what a dry run would stop.
	Postmasters []Postmaster
	// Running says why a directory bank-sim made is kept all the same: a
	// postmaster.pid in it names a running postgres that Prune cannot
	// prove bank-sim's, which is neither stopped nor has its data removed
	// from under it. Nothing in such a directory is touched, its recorded
	// processes included: it is left as found, for its owner to look at.
	Running error
	Removed bool
	Err     error
}

// Prune finds the clusters in tmp ("" for os.TempDir()) that no running
// process holds (their lock is free) and, unless dryRun, kills what
// bank-sim started there and still runs, stops the postmasters left
// running on its data directories, and removes them. A cluster in use is
// never touched: its lock is taken first, and kept until its directory is
// gone. Nor is a directory bank-sim cannot prove it made, or a process it
// cannot prove it started (record.go): those are listed with Kept; nor a
// directory a postgres that cannot be proven bank-sim's may still run on
// (postmaster.go): listed with Running.
func Prune(tmp string, dryRun bool) ([]Leftover, error) {
	if tmp == "" {
		tmp = os.TempDir()
	}
	matches, err := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
	if err != nil {
		return nil, err
	}
	var found []Leftover
	for _, dir := range matches {
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue // not a cluster's (or not ours to open)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue // in use
		}
		l := Leftover{Dir: dir, Bytes: sizeOf(dir), Kept: proven(dir)}
		if l.Kept == nil {
			l.Postmasters, l.Running = leftoverPostmasters(dir)
		}
		if !dryRun && l.Kept == nil && l.Running == nil {
			l.Killed, l.Err = killRecorded(dir)
			if l.Err == nil {
				// After the agents: a live one would start it again.
				l.Err = stopPostmasters(l.Postmasters)
			}
			if l.Err == nil {
				l.Err = os.RemoveAll(dir)
			}
			l.Removed = l.Err == nil
		}
		f.Close()
		found = append(found, l)
	}
	return found, nil
}

// killRecorded kills the processes recorded in a dead run's cluster that
// still run, and their descendants: frozen first, so that none forks
// between the list and the kill.
func killRecorded(dir string) (int, error) {
	rs, err := readRecord(dir)
	if err != nil {
		return 0, fmt.Errorf("its record of processes cannot be read, so it is kept: %v", err)
	}
	n, err := killAll(rs)
	if err != nil {
		return n, errors.New("some of its processes survived SIGKILL; it is kept")
	}
	return n, nil
}

// killAll kills the processes of rs that still run, with their
// descendants, and waits (10 s at most) until they are gone.
func killAll(rs []recorded) (int, error) {
	pids := recordedProcs(rs)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	pids = recordedProcs(rs)
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return len(pids), waitGone(ctx, pids)
}

func sizeOf(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
