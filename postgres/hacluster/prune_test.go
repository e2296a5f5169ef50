package hacluster_test

import (
	"errors"
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

// Prune removes the cluster directory of a run that has ended (its lock
// free), killing what still runs in it, and leaves alone one whose lock is
// held (a running test's) and a bank-sim-ha-* directory without the lock
// file (not a cluster's). No pg_auto_failover needed: the leftovers are
// made by hand.
func TestPruneRemovesOnlyEndedClusters(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name string, lock bool) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(dir, "node1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "node1", "postgresql.conf"), []byte("port = 5\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if lock {
			if err := os.WriteFile(filepath.Join(dir, "bank-sim-ha.lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	ended, inUse, other := mk("bank-sim-ha-101", true), mk("bank-sim-ha-202", true), mk("bank-sim-ha-303", false)

	// A running test holds its cluster's lock.
	f, err := os.OpenFile(filepath.Join(inUse, "bank-sim-ha.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	// Processes the ended run left: one naming its data directory as a
	// postmaster does, one retitled as pg_autoctl's services are, working
	// in it; and one of the running test's.
	left := stray(t, filepath.Join(ended, "node1"), "")
	retitled := stray(t, filepath.Join(ended, "node1"), "pg_autoctl: start/stop postgres")
	live := stray(t, filepath.Join(inUse, "node1"), "")

	dry, err := hacluster.Prune(tmp, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 1 || dry[0].Dir != ended || dry[0].Removed || dry[0].Bytes == 0 {
		t.Fatalf("dry run found %+v; want only %s, with its size, not removed", dry, ended)
	}
	if _, err := os.Stat(ended); err != nil || !running(left) {
		t.Fatalf("a dry run removed %s (%v) or killed its process", ended, err)
	}

	found, err := hacluster.Prune(tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Dir != ended || !found[0].Removed || found[0].Killed != 2 || found[0].Err != nil {
		t.Fatalf("prune found %+v; want %s removed, its two processes killed", found, ended)
	}
	if _, err := os.Stat(ended); !os.IsNotExist(err) {
		t.Fatalf("%s is still there: %v", ended, err)
	}
	for _, p := range []*exec.Cmd{left, retitled} {
		if err := waitExit(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{inUse, other} {
		if _, err := os.Stat(filepath.Join(d, "node1", "postgresql.conf")); err != nil {
			t.Fatalf("prune touched %s: %v", d, err)
		}
	}
	if !running(live) {
		t.Fatal("prune killed a process of the cluster in use")
	}
}

// stray starts a process whose command line names dir, as a postmaster's
// does (postgres -D dir), or, given a title, one titled so that works in
// dir; it is killed when the test ends.
func stray(t *testing.T, dir, title string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("bash", "-c", `exec -a "postgres -D $0" sleep 600`, dir)
	want := "postgres -D"
	if title != "" {
		cmd = exec.Command("bash", "-c", `exec -a "$0" sleep 600`, title)
		cmd.Dir, want = dir, title
	}
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
	// Until exec has happened, the command line is bash's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cmdline")
		if strings.HasPrefix(string(b), want) {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stray process never ran as %s (in %s)", want, dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
		return errors.New("the left process was still running 30 s after prune")
	}
}
