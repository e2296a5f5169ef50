package hacluster_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// start starts a cluster for t, or skips t when pg_auto_failover is not
// installed; the cluster is stopped when t ends, failed or not.
func start(t *testing.T, o hacluster.Options) *hacluster.Cluster {
	t.Helper()
	return startFor(t, hacluster.Available, func(log io.Writer) (*hacluster.Cluster, error) {
		o.Log = log
		return hacluster.Start(context.Background(), o)
	})
}

// startFor starts a cluster for t with start, told where to log its
// progress (t's log with -v), or skips t when available says its engine
// is not installed. The cluster is stopped when t ends, failed or not,
// once the end of its logs (when it keeps them) has been logged if t
// failed.
func startFor[C interface{ Stop() error }](t *testing.T, available func() error, start func(log io.Writer) (C, error)) C {
	t.Helper()
	if err := available(); err != nil {
		t.Skip(err.Error())
	}
	var log io.Writer
	if testing.Verbose() {
		log = &testLog{t: t}
	}
	c, err := start(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, ok := any(c).(interface{ Logs(int) string }); ok && t.Failed() {
			t.Logf("the cluster's logs:\n%s", l.Logs(60))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// stopLeavesNothing stops a cluster in dir and fails t if its directory or
// any of its processes is left.
func stopLeavesNothing(t *testing.T, dir string, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after Stop: %v", dir, err)
	}
	if left := procsIn(t, dir); len(left) > 0 {
		t.Errorf("processes left after Stop:\n%s", strings.Join(left, "\n"))
	}
}

// searchableTemp is a temporary directory for t that nobody (the user
// clusters run as when the tests run as root) can search, as /tmp.
func searchableTemp(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	for _, d := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return tmp
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// A synchronous formation keeps a committed row across the SIGKILL of
// its whole primary node: the standby is promoted, the cluster's URL
// reaches it, and Stop leaves no process and no directory behind.
func TestSyncFailoverKeepsACommittedRow(t *testing.T) {
	pgtest.Exhaustive(t)
	c := start(t, hacluster.Options{Sync: true})
	t.Logf("started in %s", c.Startup.Round(time.Millisecond))
	ctx, cancel := context.WithTimeoutCause(context.Background(), 2*time.Minute, errors.New("the test did not finish within 2 minutes"))
	defer cancel()

	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	var listen, sockets, names string
	if err := conn.QueryRow(ctx, "SELECT current_setting('listen_addresses'), current_setting('unix_socket_directories'), current_setting('synchronous_standby_names')").Scan(&listen, &sockets, &names); err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1" || sockets != "" || names == "" {
		t.Fatalf("listen_addresses %q, unix_socket_directories %q, synchronous_standby_names %q; want 127.0.0.1, none, a standby", listen, sockets, names)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (id int PRIMARY KEY); INSERT INTO kept VALUES (7), (11)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pss, rss, procs := c.Memory()
	t.Logf("memory: %d processes, PSS %d MiB, RSS %d MiB", procs, pss>>20, rss>>20)

	old, err := c.KillLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procsIn(t, c.Dir()) {
		if strings.Contains(p, filepath.Join(c.Dir(), old.Name)) {
			t.Fatalf("a process of the killed %s is still running: %s", old.Name, p)
		}
	}
	f, err := c.WaitFailover(ctx, old, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s; %s promoted: monitor %s, first write %s", old.Name, f.Promoted.Name, f.Monitor.Round(time.Millisecond), f.Write.Round(time.Millisecond))
	if f.Promoted.Name == old.Name || f.Promoted.Port == old.Port {
		t.Fatalf("promoted %+v, the node that was killed", f.Promoted)
	}
	// The monitor's events since Start: the promotion (through
	// wait_primary, as pg_auto_failover promotes), none of the start's.
	evs, err := c.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	promoted := slices.ContainsFunc(evs, func(e hacluster.Event) bool { return e.Node == f.Promoted.Name && e.Goal == "wait_primary" })
	started := slices.ContainsFunc(evs, func(e hacluster.Event) bool { return e.Goal == "single" || e.Goal == "catchingup" })
	if !promoted || started {
		t.Fatalf("the monitor's events since Start: %+v; want %s's promotion through wait_primary, and none of the start's (single, catchingup)", evs, f.Promoted.Name)
	}
	conn, err = pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var port int
	if err := conn.QueryRow(ctx, "SELECT count(*), inet_server_port() FROM kept WHERE id IN (7, 11)").Scan(&n, &port); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if n != 2 || port != f.Promoted.Port {
		t.Fatalf("after failover: %d of the 2 rows, on port %d; want both, on %s's %d", n, port, f.Promoted.Name, f.Promoted.Port)
	}

	stopLeavesNothing(t, c.Dir(), c.Stop)
}

// procsIn lists the processes whose command line names dir.
func procsIn(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("ps", "-eo", "pid,args").Output()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, dir) {
			found = append(found, strings.TrimSpace(l))
		}
	}
	return found
}

// A cluster that does not come up in time fails with a message saying what
// it was waiting for, and leaves no process and no directory behind.
func TestStartThatTimesOutLeavesNothing(t *testing.T) {
	if err := hacluster.Available(); err != nil {
		t.Skip(err.Error())
	}
	tmp := searchableTemp(t)
	t.Setenv("TMPDIR", tmp)
	_, err := hacluster.Start(context.Background(), hacluster.Options{StartTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not come up within 500ms") {
		t.Fatalf("Start with half a second: %v; want the bound named", err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "bank-sim-ha-*"))
	if len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	if p := procsIn(t, tmp); len(p) > 0 {
		t.Fatalf("processes left:\n%s", strings.Join(p, "\n"))
	}
}
