package hacluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
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
// the directory is one bank-sim made (proven) whose lock is free, and the
// postmaster is proven one by procfs.ProvePostmaster (its executable, its
// start time against line 3 of postmaster.pid, its working directory) and
// to have started after the directory's mark was written (the mark's
// ctime, which no one can set back). When a postgres is named but the
// proof fails, it keeps the directory, saying why.
//
// A pid that names no process, or one that is not postgres, is no reason
// to keep the directory: the postmaster that wrote it is gone, the pid
// reused.

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
// (procfs.ProvePostmaster, started after made), or none (PID 0) when
// nothing runs there; the error completes "DATA/postmaster.pid …" with why
// it cannot be proven.
func leftoverPostmaster(data string, made time.Time) (Postmaster, error) {
	pm, err := procfs.ProvePostmaster(data, made)
	if err != nil || pm.PID == 0 {
		return Postmaster{}, err
	}
	return Postmaster{PID: pm.PID, Node: filepath.Base(data), start: pm.Start}, nil
}

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
