package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Leftover is one thing Prune found: a namespace or a root-side link of a
// run's state file, or a namespace named like a run's that no state file
// records.
type Leftover struct {
	Run  string // the run's id; "" for a look-alike
	Kind string // "namespace" or "link"
	Name string
	// State: Removed (or, in a dry run, would be), Live (its run still
	// holds its state file), Gone (listed, no longer there), Foreign (not
	// provably the run's: left alone).
	State LeftoverState
	Err   error
}

// LeftoverState is what Prune did with a Leftover.
type LeftoverState int

// The states of a Leftover.
const (
	Removed LeftoverState = iota
	Live
	Gone
	Foreign
)

// emptyGrace is how long a state file may stay empty: a run writes it a
// moment after creating it.
const emptyGrace = time.Minute

// Prune removes what runs that ended without Close (SIGKILL, a crash) left
// in stateDir's records: their namespaces and root-side links, then their
// state files. A run that still holds its file's lock is alive and
// untouched; so is every namespace or link whose inode or index is not
// the recorded one, and every namespace named like bank-sim's that no file
// records (reported as Foreign). dryRun removes nothing.
func Prune(stateDir string, dryRun bool) ([]Leftover, error) {
	files, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		return nil, err
	}
	var found []Leftover
	recorded := map[string]bool{}
	for _, path := range files {
		found = append(found, pruneRun(path, dryRun, recorded)...)
	}
	// Look-alikes: named like a run's, recorded by none.
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), nsPrefix) && !recorded[e.Name()] {
			found = append(found, Leftover{Kind: "namespace", Name: e.Name(), State: Foreign})
		}
	}
	sort.SliceStable(found, func(i, j int) bool { return found[i].State < found[j].State })
	return found, nil
}

func pruneRun(path string, dryRun bool, recorded map[string]bool) []Leftover {
	id := strings.TrimSuffix(filepath.Base(path), ".json")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return []Leftover{{Run: id, Kind: "state file", Name: path, Err: err}}
	}
	defer f.Close()
	st, rerr := readState(path)
	live := false
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return []Leftover{{Run: id, Kind: "state file", Name: path, Err: fmt.Errorf("cannot lock it: %v", err)}}
		}
		live = true
	}
	var out []Leftover
	for _, r := range st.Namespaces {
		recorded[r.Name] = true
		l := Leftover{Run: id, Kind: "namespace", Name: r.Name}
		ino, err := nsIdentity(r.Name)
		switch {
		case err != nil:
			l.State = Gone
		case live:
			l.State = Live
		case r.Inode == 0 || ino != r.Inode || !strings.HasPrefix(r.Name, nsPrefix+id+"-"):
			// Inode 0: killed between ip netns add and recording it; the
			// name alone proves nothing.
			l.State = Foreign
		case !dryRun:
			l.Err = removeNamespace(r)
		}
		out = append(out, l)
	}
	for _, r := range st.Links {
		l := Leftover{Run: id, Kind: "link", Name: r.Name}
		idx, err := interfaceIndex(r.Name)
		switch {
		case err != nil:
			l.State = Gone
		case live:
			l.State = Live
		case r.Index == 0 || idx != r.Index || !strings.HasPrefix(r.Name, ifPrefix+id+"-"):
			l.State = Foreign
		case !dryRun:
			l.Err = removeLink(r)
		}
		out = append(out, l)
	}
	if live || dryRun {
		return out
	}
	if errors.Is(rerr, errEmpty) {
		if fi, err := f.Stat(); err == nil && time.Since(fi.ModTime()) < emptyGrace {
			return out // a run that is just starting
		}
	}
	failed := rerr != nil && !errors.Is(rerr, errEmpty)
	for _, l := range out {
		failed = failed || l.Err != nil
	}
	if !failed {
		os.Remove(path)
	}
	return out
}
