package hacluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/hacluster"
)

// Prune kills only the processes bank-sim recorded when it started them
// (pid and start time), with their descendants, and removes only a
// directory bank-sim marked as made by it. A bystander is never hit: a
// bank-sim-ha-* directory with a free lock but no mark and the process
// working in it, a process whose command line names the cluster's
// directory or that works in it, a process whose pid a record names with
// another start time (the pid reused), and a copy of a cluster's
// directory, record included (cp -a). No pg_auto_failover needed: the
// processes are sleeps.
func TestPruneKillsOnlyWhatBankSimRecorded(t *testing.T) {
	tmp := t.TempDir()
	dir, record, unlock, err := hacluster.MakeDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	// A directory that only looks like a cluster's, with a user working
	// in it.
	lookalike := filepath.Join(tmp, "bank-sim-ha-x")
	if err := os.Mkdir(lookalike, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lookalike, "bank-sim-ha.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	user := stray(t, lookalike, "sleep", "600")

	// What the run started: a process and its child, both to be killed.
	child := stray(t, "", "bash", "-c", "sleep 600 & wait")
	if err := record(child.Process.Pid, child.Args); err != nil {
		t.Fatal(err)
	}
	grandchild := waitChild(t, child.Process.Pid)

	// Bystanders of the cluster's directory: one naming it, one working
	// in it, one whose pid is recorded with another start time.
	naming := stray(t, "", "bash", "-c", `exec -a "postgres -D $0/node1" sleep 600`, dir)
	working := stray(t, dir, "sleep", "600")
	reused := stray(t, "", "sleep", "600")
	appendLine(t, filepath.Join(dir, "bank-sim-ha.procs"), fmt.Sprintf("%d %d [\"sleep\",\"600\"]\n", reused.Process.Pid, startTime(t, reused.Process.Pid)+1))

	// A copy of the running cluster's directory: its lock is free, its
	// mark and record are the original's.
	cp := filepath.Join(tmp, "bank-sim-ha-copy")
	if out, err := exec.Command("cp", "-a", dir, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v: %s", err, out)
	}

	alive := func(when string, cmds ...*exec.Cmd) {
		t.Helper()
		for _, c := range cmds {
			if !running(c) {
				t.Errorf("%s: %q (pid %d) was killed", when, strings.Join(c.Args, " "), c.Process.Pid)
			}
		}
	}
	kept := func(when string, found []hacluster.Leftover, dirs ...string) {
		t.Helper()
		for _, d := range dirs {
			if _, err := os.Stat(d); err != nil {
				t.Errorf("%s: %s is gone: %v", when, d, err)
			}
			for _, l := range found {
				if l.Dir == d && (l.Kept == nil || l.Removed || l.Killed != 0) {
					t.Errorf("%s: %s was taken as bank-sim's: %+v", when, d, l)
				}
			}
		}
	}

	// The cluster in use, its lock held.
	found, err := hacluster.Prune(tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 2 {
		t.Errorf("with the cluster in use, prune found %+v; want the copy and the look-alike, kept", found)
	}
	kept("with the cluster in use", found, dir, cp, lookalike)
	alive("with the cluster in use", user, child, naming, working, reused)

	// The run killed: its lock free.
	unlock()
	dry, err := hacluster.Prune(tmp, true)
	if err != nil {
		t.Fatal(err)
	}
	kept("dry run", dry, cp, lookalike)
	alive("dry run", user, child, naming, working, reused)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a dry run removed %s: %v", dir, err)
	}

	found, err = hacluster.Prune(tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	var got *hacluster.Leftover
	for i := range found {
		if found[i].Dir == dir {
			got = &found[i]
		}
	}
	if got == nil || got.Kept != nil || !got.Removed || got.Err != nil || got.Killed != 2 {
		t.Fatalf("prune found %+v; want %s removed, its 2 recorded processes killed", found, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	if err := waitExit(child); err != nil {
		t.Error(err)
	}
	if err := waitGone(grandchild); err != nil {
		t.Error(err)
	}
	kept("after the run ended", found, cp, lookalike)
	alive("after the run ended", user, naming, working, reused)
}

// stray starts name args working in dir ("" for here), not reaped until
// the test ends, when it is killed.
func stray(t *testing.T, dir, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	return strayCmd(t, cmd)
}

// strayCmd starts cmd as stray does.
func strayCmd(t *testing.T, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	strays[cmd] = done
	return cmd
}

var strays = map[*exec.Cmd]chan struct{}{}

func running(cmd *exec.Cmd) bool {
	select {
	case <-strays[cmd]:
		return false
	default:
		return true
	}
}

func waitExit(cmd *exec.Cmd) error {
	select {
	case <-strays[cmd]:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%q was still running 30 s after prune", strings.Join(cmd.Args, " "))
	}
}

// waitChild waits for pid's first child and returns it; it is killed when
// the test ends.
func waitChild(t *testing.T, pid int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if f := strings.Fields(string(b)); len(f) > 0 {
			kid, _ := strconv.Atoi(f[0])
			t.Cleanup(func() { syscall.Kill(kid, syscall.SIGKILL) })
			return kid
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d started no child within 30 s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitGone waits until pid (not our child: reaped by its parent or init)
// has exited.
func waitGone(pid int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the recorded process's child %d was still running 30 s after prune", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startTime is field 22 of pid's /proc/PID/stat.
func startTime(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	n, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func appendLine(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}
