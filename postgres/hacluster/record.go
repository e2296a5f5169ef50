package hacluster

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
)

// What proves that a bank-sim-ha-* directory, and a process, are bank-sim's.
//
// A name proves nothing: anyone can make a bank-sim-ha-x with a lock file
// in it, and a process whose working directory or command line names a
// path may be anyone's (a shell, an editor, su). So the cluster's
// directory carries a mark written when it was made, which names the
// directory itself (its path, device and inode: a copy, cp -a or a backup
// restored, has another inode), and every process bank-sim starts in it is
// recorded by pid and start time (a pid alone is reused; the pair names
// one process until the machine reboots). Both files must be this user's
// and writable by no one else: when root runs the cluster as nobody,
// nobody owns the directory and could write any file in it but these.
const (
	markName  = "bank-sim-ha.made"
	procsName = "bank-sim-ha.procs"
)

// mark is the content of dir's mark, given its stat.
func mark(dir string, st *syscall.Stat_t) string {
	return fmt.Sprintf("a pg_auto_failover cluster directory made by bank-sim: %s (device %d, inode %d)\n", dir, st.Dev, st.Ino)
}

// writeMark writes the mark of dir, which this process has just made, and
// the empty record of its processes.
func writeMark(dir string) error {
	st, err := dirStat(dir)
	if err != nil {
		return err
	}
	for name, content := range map[string]string{markName: mark(dir, st), procsName: ""} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = f.WriteString(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func dirStat(dir string) (*syscall.Stat_t, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	return st, nil
}

// proven says why dir is not provably a cluster directory bank-sim made,
// or nil when it is.
func proven(dir string) error {
	st, err := dirStat(dir)
	if err != nil {
		return err
	}
	b, err := readOwn(filepath.Join(dir, markName))
	if err != nil {
		return err
	}
	if string(b) != mark(dir, st) {
		return fmt.Errorf("its %s names another directory (this one is a copy, or was moved)", markName)
	}
	return nil
}

// readOwn reads a regular file that this user owns and no one else may
// write: what anyone else could have written proves nothing.
func readOwn(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s in it", filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular() || !ok:
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s belongs to uid %d, not to this user", filepath.Base(path), st.Uid)
	case fi.Mode().Perm()&0o022 != 0:
		return nil, fmt.Errorf("%s may be written by others (mode %v)", filepath.Base(path), fi.Mode().Perm())
	}
	// A record grows by a line per process started: a few kilobytes.
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// recorder appends the processes a cluster starts to its record.
type recorder struct {
	mu  sync.Mutex
	dir string
}

// record appends pid, with its start time and argv, to the record. pid
// must still be the process meant: an unreaped child, or one just checked.
func (r *recorder) record(pid int, argv []string) error {
	p, ok := procfs.Stat(pid)
	if !ok {
		return fmt.Errorf("cannot read the start time of process %d", pid)
	}
	args, err := json.Marshal(argv)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(r.dir, procsName), os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d %d %s\n", pid, p.StartTime, args)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// recorded is one line of a record.
type recorded struct {
	pid   int
	start uint64
}

// readRecord reads the processes recorded in dir.
func readRecord(dir string) ([]recorded, error) {
	b, err := readOwn(filepath.Join(dir, procsName))
	if err != nil {
		return nil, err
	}
	var rs []recorded
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) < 2 {
			continue
		}
		pid, err1 := strconv.Atoi(f[0])
		start, err2 := strconv.ParseUint(f[1], 10, 64)
		if err := errors.Join(err1, err2); err != nil || pid <= 0 {
			continue // a line cut short by a kill: its process was never started
		}
		rs = append(rs, recorded{pid: pid, start: start})
	}
	return rs, sc.Err()
}

// recordedProcs are the processes of a record still running: each
// recorded process whose pid still has its recorded start time, and every
// descendant of one (a postmaster's backends, pg_autoctl's services),
// which it started.
func recordedProcs(rs []recorded) []int {
	ps := procfs.Scan()
	byPID := map[int]procfs.Proc{}
	kids := map[int][]int{}
	for _, p := range ps {
		byPID[p.PID] = p
		kids[p.PPID] = append(kids[p.PPID], p.PID)
	}
	var pids []int
	seen := map[int]bool{}
	var add func(pid int)
	add = func(pid int) {
		if seen[pid] || byPID[pid].State == 'Z' {
			return
		}
		seen[pid] = true
		pids = append(pids, pid)
		for _, k := range kids[pid] {
			add(k)
		}
	}
	for _, r := range rs {
		if p, ok := byPID[r.pid]; ok && p.StartTime == r.start {
			add(r.pid)
		}
	}
	return pids
}
