package hacluster_test

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/hacluster"
	"github.com/banksim/bank-sim/postgres/internal/procfs"
	"github.com/banksim/bank-sim/postgres/internal/snapshot"
)

// A postmaster whose agent was killed (a pg_autoctl or patroni SIGKILLed
// with its test) runs on, reparented, no descendant of anything recorded:
// prune stops it, children included, before it removes the cluster's
// directory, and a dry run says it would. Only one it can prove its own:
// a postgres that a postmaster.pid names but that started before the
// directory was made, or not when line 3 of postmaster.pid says, or that
// works in another directory, is not stopped, and its directory is kept,
// saying why; a postmaster.pid naming a process that is not postgres (the
// pid reused) stops nothing and keeps nothing. One real PostgreSQL; the
// bystanders are copies of sleep named postgres, each passing every check
// but one.
func TestPruneStopsThePostmasterAKilledAgentLeft(t *testing.T) {
	pg, err := hacluster.PostgresBin()
	if err != nil {
		t.Fatalf("a real postmaster is needed: %v", err)
	}
	tmp := searchableTemp(t)
	fake := filepath.Join(tmp, "bin", "postgres")
	copyFile(t, mustLookPath(t, "sleep"), fake)

	// Started before any cluster directory is made; it moves into one,
	// keeping its start time, once there is one.
	early, earlyEpoch, earlyIn := bystander(t, "", `read d; cd "$d" && exec "$0" 600`, fake)

	dirs := map[string]string{}
	var recordReal func(pid int, argv []string) error
	var unlocks []func()
	for _, name := range []string{"real", "before", "line3", "sleep", "elsewhere"} {
		dir, record, unlock, err := hacluster.MakeDir(tmp)
		if err != nil {
			t.Fatal(err)
		}
		dirs[name] = dir
		unlocks = append(unlocks, unlock)
		t.Cleanup(unlock)
		if name == "real" {
			recordReal = record
			continue
		}
		if err := os.Mkdir(filepath.Join(dir, "node1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := func(name string) string { return filepath.Join(dirs[name], "node1") }

	// The real cluster: its agent (recorded, as pg_autoctl and patroni
	// are) starts a postmaster (after initdb, if there is no snapshot to
	// unpack), and is killed.
	unpackCluster(t, pg, data("real"))
	agent := exec.Command("bash", "-c", `[ -d "$1" ] || "$0/initdb" -D "$1" -N -A trust -U postgres >"$1.log" 2>&1 || exit 1
"$0/postgres" -D "$1" -k "$1" -c listen_addresses= -c fsync=off -c shared_buffers=1MB >>"$1.log" 2>&1 &
wait`, filepath.Join(pg, "bin"), data("real"))
	agent.Dir = tmp
	agent.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	if os.Geteuid() == 0 {
		uid, gid := procfs.Nobody()
		agent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	}
	strayCmd(t, agent)
	if err := recordReal(agent.Process.Pid, agent.Args); err != nil {
		t.Fatal(err)
	}
	pm := waitReady(t, agent, data("real"))
	t.Cleanup(func() { // only if prune failed to
		if procfs.Alive(pm) {
			syscall.Kill(pm, syscall.SIGQUIT)
			waitGone(pm)
		}
	})
	agent.Process.Kill()
	if err := waitExit(agent); err != nil {
		t.Fatal(err)
	}
	kids := procfs.Children(pm)
	if !procfs.Alive(pm) || len(kids) == 0 {
		t.Fatalf("the postmaster %d (children %v) did not outlive its agent", pm, kids)
	}

	// The bystanders, each named by a postmaster.pid.
	fmt.Fprintln(earlyIn, data("before"))
	waitExe(t, early.Process.Pid, fake)
	writePIDFile(t, data("before"), early.Process.Pid, earlyEpoch)
	line3, line3Epoch, _ := bystander(t, data("line3"), `exec "$0" 600`, fake)
	waitExe(t, line3.Process.Pid, fake)
	writePIDFile(t, data("line3"), line3.Process.Pid, line3Epoch-100)
	sleep, sleepEpoch, _ := bystander(t, data("sleep"), `exec sleep 600`)
	waitExe(t, sleep.Process.Pid, mustLookPath(t, "sleep"))
	writePIDFile(t, data("sleep"), sleep.Process.Pid, sleepEpoch)
	elsewhere, elsewhereEpoch, _ := bystander(t, tmp, `exec "$0" 600`, fake)
	waitExe(t, elsewhere.Process.Pid, fake)
	writePIDFile(t, data("elsewhere"), elsewhere.Process.Pid, elsewhereEpoch)

	for _, unlock := range unlocks {
		unlock()
	}
	byDir := func(found []hacluster.Leftover) map[string]hacluster.Leftover {
		m := map[string]hacluster.Leftover{}
		for _, l := range found {
			m[l.Dir] = l
		}
		return m
	}
	alive := func(when string) {
		t.Helper()
		for _, c := range []*exec.Cmd{early, line3, sleep, elsewhere} {
			if !running(c) {
				t.Errorf("%s: the bystander %q (pid %d) was killed", when, strings.Join(c.Args, " "), c.Process.Pid)
			}
		}
	}
	keptFor := func(when string, got map[string]hacluster.Leftover, name, why string) {
		t.Helper()
		l := got[dirs[name]]
		if l.Running == nil || !strings.Contains(l.Running.Error(), why) || l.Removed || len(l.Postmasters) != 0 {
			t.Errorf("%s: the %q cluster: %+v; want it kept, its postgres not provably bank-sim's: %q", when, name, l, why)
		}
		if _, err := os.Stat(dirs[name]); err != nil {
			t.Errorf("%s: the %q cluster's directory is gone: %v", when, name, err)
		}
	}

	dry, err := hacluster.Prune(tmp, true)
	if err != nil {
		t.Fatal(err)
	}
	got := byDir(dry)
	if l := got[dirs["real"]]; l.Running != nil || len(l.Postmasters) != 1 || l.Postmasters[0].PID != pm || l.Postmasters[0].Node != "node1" {
		t.Errorf("dry run: the real cluster: %+v; want its postmaster %d on node1 named", l, pm)
	}
	if !procfs.Alive(pm) {
		t.Errorf("a dry run stopped the postmaster %d", pm)
	}
	alive("dry run")

	found, err := hacluster.Prune(tmp, false)
	if err != nil {
		t.Fatal(err)
	}
	got = byDir(found)
	if l := got[dirs["real"]]; !l.Removed || l.Err != nil || len(l.Postmasters) != 1 || l.Postmasters[0].PID != pm {
		t.Errorf("the real cluster: %+v; want its postmaster %d stopped and the directory removed", l, pm)
	}
	// Gone before the directory was, not later (PostgreSQL's own check
	// of its lock file, once a minute, would find it missing).
	for _, pid := range append([]int{pm}, kids...) {
		if procfs.Alive(pid) {
			t.Errorf("process %d (the postmaster %d or a child) still runs after prune", pid, pm)
		}
	}
	if _, err := os.Stat(dirs["real"]); !os.IsNotExist(err) {
		t.Errorf("the real cluster's directory is still there: %v", err)
	}
	alive("after prune")
	keptFor("after prune", got, "before", "before the directory was made")
	keptFor("after prune", got, "line3", "but postmaster.pid says its postmaster started at")
	keptFor("after prune", got, "elsewhere", "working in another directory")
	if l := got[dirs["sleep"]]; !l.Removed || l.Running != nil || len(l.Postmasters) != 0 {
		t.Errorf("the cluster whose postmaster.pid names a sleep: %+v; want it removed, nothing stopped", l)
	}
}

// unpackCluster makes the data directory data from bank-sim's built-in
// snapshot of a new cluster, a tenth of initdb's time, as the user the
// clusters run as; it leaves data alone when no snapshot fits pg, for
// initdb to make.
func unpackCluster(t *testing.T, pg, data string) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "snapshots", fmt.Sprintf("pg%s-%s.tar.gz", filepath.Base(pg), runtime.GOARCH)))
	if err != nil {
		t.Logf("no snapshot, initdb instead: %v", err)
		return
	}
	defer f.Close()
	if err := snapshot.Unpack(f, data); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return
	}
	uid, gid := procfs.Nobody()
	err = filepath.WalkDir(data, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bystander starts script in bash, working in dir, with args; before it
// runs script, bash says when it started, in whole seconds, as postgres
// writes on line 3 of postmaster.pid. It returns the process, that time and
// its standard input.
func bystander(t *testing.T, dir, script string, args ...string) (*exec.Cmd, int64, io.Writer) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-c", "echo $EPOCHSECONDS; " + script}, args...)...)
	cmd.Dir = dir
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	strayCmd(t, cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%q said nothing: %v", script, err)
	}
	epoch, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	if err != nil {
		t.Fatalf("%q said %q: %v", script, line, err)
	}
	return cmd, epoch, in
}

// writePIDFile writes a postmaster.pid as PostgreSQL 15 does.
func writePIDFile(t *testing.T, data string, pid int, started int64) {
	t.Helper()
	s := fmt.Sprintf("%d\n%s\n%d\n5432\n%s\n\n  5432001         0\nready   \n", pid, data, started, data)
	if err := os.WriteFile(filepath.Join(data, "postmaster.pid"), []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitReady waits until the postmaster agent starts on data is ready, and
// returns its pid.
func waitReady(t *testing.T, agent *exec.Cmd, data string) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(data, "postmaster.pid"))
		if lines := strings.Split(string(b), "\n"); len(lines) > 7 && strings.TrimSpace(lines[7]) == "ready" {
			pid, err := strconv.Atoi(lines[0])
			if err != nil {
				t.Fatalf("postmaster.pid: %q", b)
			}
			return pid
		}
		if !running(agent) || time.Now().After(deadline) {
			log, _ := os.ReadFile(data + ".log")
			t.Fatalf("the postmaster on %s was not ready within 60 s (agent running: %t): %s", data, running(agent), log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExe waits until pid runs exe.
func waitExe(t *testing.T, pid int, exe string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); got == exe {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not run %s within 30 s", pid, exe)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err = filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
