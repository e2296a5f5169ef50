package hacluster

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/internal/procfs"
)

// A node's run that leaves a process behind in a session of its own (as
// Patroni's postmaster is, restarted after a switchover: neither in the
// run's group nor a child of the postmaster in the pid file) is still the
// node's: it holds the run's output pipe. Stopping the node kills it too
// and returns at once, instead of waiting out its bound for the pipe to
// close (the Patroni matrix's failover-command cells: "pg_autoctl was not
// reaped"). No PostgreSQL needed: the processes are sleeps.
func TestStopKillsWhatARunLeftInASessionOfItsOwn(t *testing.T) {
	c := &Cluster{}
	if err := c.makeDir(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	defer c.lock.Close()
	c.cred = nil // the sleeps run as this test's user
	run, err := c.start("node1", "bash", "-c", "setsid sleep 600 & echo $!; exec sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{Node: Node{Name: "node1"}, data: t.TempDir(), run: run}
	var left int
	for deadline := time.Now().Add(10 * time.Second); left == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the run never said its background pid: %q", run.out.String())
		}
		out := run.out.String()
		if i := strings.IndexByte(out, '\n'); i > 0 {
			if _, err := fmt.Sscan(out[:i], &left); err != nil {
				t.Fatalf("the run's first line %q: %v", out[:i], err)
			}
		}
	}
	defer syscall.Kill(left, syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.killNode(ctx, n); err != nil {
		t.Errorf("stopping the node: %v", err)
	}
	if procfs.Alive(left) {
		t.Errorf("the process the run left in a session of its own (pid %d) is still alive", left)
	}
}
