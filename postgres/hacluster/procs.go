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
	// Killed counts the processes still running in it that Prune killed.
	Killed  int
	Removed bool
	Err     error
}

// Prune finds the clusters in tmp ("" for os.TempDir()) that no running
// process holds (their lock is free) and, unless dryRun, kills whatever
// still runs in them and removes them. A cluster in use is never touched:
// its lock is taken first, and kept until its directory is gone.
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
		f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR, 0)
		if err != nil {
			continue // not a cluster's (or not ours to open)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue // in use
		}
		l := Leftover{Dir: dir, Bytes: sizeOf(dir)}
		if !dryRun {
			l.Killed, l.Err = killLeft(dir)
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

// killLeft kills the processes still running in a dead run's cluster:
// those working in its directory or whose command line names it (a
// postmaster's backends do neither, but are its children).
func killLeft(dir string) (int, error) {
	var pids []int
	var postmasters []int
	for _, p := range scanProcs() {
		// pg_autoctl's services retitle themselves ("pg_autoctl: start/stop
		// postgres"), but work in the cluster's directory.
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.pid))
		inDir := cwd == dir || strings.HasPrefix(cwd, dir+string(filepath.Separator))
		if p.state != 'Z' && p.cmdline != "" && (inDir || strings.Contains(p.cmdline, dir+string(filepath.Separator))) {
			pids = append(pids, p.pid)
			if strings.Contains(p.cmdline, "postgres -D") || strings.HasSuffix(strings.Fields(p.cmdline)[0], "/postgres") {
				postmasters = append(postmasters, p.pid)
			}
		}
	}
	for _, p := range scanProcs() {
		for _, pm := range postmasters {
			if p.ppid == pm && p.state != 'Z' {
				pids = append(pids, p.pid)
			}
		}
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitGone(ctx, pids); err != nil {
		return len(pids), errors.New("some of its processes survived SIGKILL; it is kept")
	}
	return len(pids), nil
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
