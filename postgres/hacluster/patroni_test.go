package hacluster_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// startPatroni starts a Patroni cluster for t, or skips t when Patroni or
// etcd is not installed; when t fails, the end of every process's log is
// logged, and the cluster is stopped when t ends, failed or not.
func startPatroni(t *testing.T, o hacluster.PatroniOptions) *hacluster.Patroni {
	t.Helper()
	return startFor(t, hacluster.PatroniAvailable, func(log io.Writer) (*hacluster.Patroni, error) {
		o.Log = log
		return hacluster.StartPatroni(context.Background(), o)
	})
}

// A Patroni cluster comes up with one leader and two replicas, takes a
// write through its multi-host URL on the leader, and Stop leaves no
// process and no directory behind.
func TestPatroniStartsAndStopsLeavingNothing(t *testing.T) {
	pgtest.Exhaustive(t)
	p := startPatroni(t, hacluster.PatroniOptions{})
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Minute, errors.New("the test did not finish within a minute"))
	defer cancel()
	ms, err := p.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]int{}
	for _, m := range ms {
		roles[m.Role+"/"+m.State]++
	}
	if len(ms) != 3 || roles["leader/running"] != 1 || roles["replica/running"] != 2 {
		t.Fatalf("members %+v; want a running leader and two running replicas", ms)
	}
	leader, err := p.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, p.URL())
	if err != nil {
		t.Fatal(err)
	}
	var port int
	err = conn.QueryRow(ctx, "SELECT inet_server_port() FROM (SELECT txid_current()) t").Scan(&port)
	conn.Close(ctx)
	if err != nil || port != leader.Port {
		t.Fatalf("a write through the URL: port %d, %v; want the leader %s on %d", port, err, leader.Name, leader.Port)
	}
	pss, rss, procs := p.Memory()
	t.Logf("started in %s; memory: %d processes, PSS %d MiB, RSS %d MiB", p.Startup.Round(time.Millisecond), procs, pss>>20, rss>>20)

	stopLeavesNothing(t, p.Dir(), p.Stop)
}

// childEnv marks the test binary run by TestPatroniOfAKilledTestIsPruned
// as the test to kill.
const childEnv = "BANK_SIM_PATRONI_CHILD"

// A test killed with SIGKILL while its Patroni cluster runs leaves no
// process (etcd and patroni get their parent-death signal, and patroni
// stops its PostgreSQL), only the directory, which prune then removes.
func TestPatroniOfAKilledTestIsPruned(t *testing.T) {
	pgtest.Exhaustive(t)
	if os.Getenv(childEnv) != "" {
		p, err := hacluster.StartPatroni(context.Background(), hacluster.PatroniOptions{})
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("CLUSTER " + p.Dir() + "\n")
		select {} // until killed
	}
	if err := hacluster.PatroniAvailable(); err != nil {
		t.Skip(err.Error())
	}
	tmp := searchableTemp(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPatroniOfAKilledTestIsPruned$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1", "TMPDIR="+tmp, "BANK_SIM_EXHAUSTIVE=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	dirs := make(chan string, 1)
	var seen strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "CLUSTER "); ok {
				dirs <- d
			}
			seen.WriteString(sc.Text() + "\n")
		}
		close(dirs)
	}()
	var dir string
	select {
	case d, ok := <-dirs:
		if !ok {
			cmd.Wait()
			t.Fatalf("the child test ended before its cluster was up:\n%s", seen.String())
		}
		dir = d
	case <-time.After(6 * time.Minute):
		t.Fatal("the child test's cluster was not up within 6 minutes")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(time.Minute)
	for left := procsIn(t, dir); len(left) > 0; left = procsIn(t, dir) {
		if time.Now().After(deadline) {
			t.Fatalf("a minute after the test was killed, its cluster's processes still run:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the killed test's directory: %v; want it left for prune", err)
	}
	found, err := hacluster.Prune(tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Dir != dir || !found[0].Removed || found[0].Err != nil {
		t.Fatalf("prune found %+v; want %s removed", found, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there after prune: %v", dir, err)
	}
}

// Without Patroni on PATH, the tests skip with what to install, and
// StartPatroni refuses before making anything.
func TestPatroniMissingSaysWhatToInstall(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("PATH", t.TempDir())
	t.Setenv("TMPDIR", tmp)
	err := hacluster.PatroniAvailable()
	if !errors.Is(err, hacluster.ErrPatroniNotInstalled) || !strings.Contains(err.Error(), "apt-get install patroni etcd-server") ||
		!strings.Contains(err.Error(), "patroni is not on PATH") {
		t.Fatalf("PatroniAvailable without patroni on PATH: %v; want what is missing and what to install", err)
	}
	if _, err := hacluster.StartPatroni(context.Background(), hacluster.PatroniOptions{}); !errors.Is(err, hacluster.ErrPatroniNotInstalled) {
		t.Fatalf("StartPatroni without patroni: %v; want ErrPatroniNotInstalled", err)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "bank-sim-ha-*")); len(left) > 0 {
		t.Fatalf("StartPatroni without patroni made %v", left)
	}
}
