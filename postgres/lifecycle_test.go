package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// fakeParent starts a server, reports it, and waits to be killed: it
// stands in for a bank-sim run that is SIGKILLed. With
// BANK_SIM_TEST_PARENT_CRASH set it first crashes and restarts the server
// once, so that the postmaster being killed is a restarted one.
func fakeParent(cacheDir string) int {
	s, err := Start(context.Background(), Options{CacheDir: cacheDir})
	if err == nil && os.Getenv("BANK_SIM_TEST_PARENT_CRASH") != "" {
		err = s.Crash(context.Background())
	}
	if err != nil {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"error": err.Error()})
		return 1
	}
	cfg, _ := pgx.ParseConfig(s.adminURL)
	json.NewEncoder(os.Stdout).Encode(map[string]any{"pid": s.postPID, "data": s.dataDir, "sup": s.proc.Pid, "port": cfg.Port})
	select {}
}

type parentInfo struct {
	Parent *exec.Cmd `json:"-"`
	PID    int       // the postmaster
	Data   string
	Sup    int
	Port   int
	Error  string
}

// startFakeParent runs the test binary as a bank-sim process with an
// embedded server and returns what it reports. The parent is killed when
// the test ends, if the test has not killed it.
func startFakeParent(t testing.TB, dir string, env ...string) parentInfo {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), "BANK_SIM_TEST_PARENT="+dir), env...)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	type line struct {
		b   []byte
		err error
	}
	lines := make(chan line, 1)
	go func() {
		b, err := bufio.NewReader(out).ReadBytes('\n')
		lines <- line{b, err}
	}()
	var info parentInfo
	select {
	case l := <-lines:
		if l.err != nil || json.Unmarshal(l.b, &info) != nil || info.Error != "" {
			t.Fatalf("fake parent: %v %s", l.err, l.b)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the fake parent did not report its server within 2 minutes")
	}
	info.Parent = cmd
	if !isPostmasterOf(info.PID, info.Data) {
		t.Fatalf("no postmaster %d on %s", info.PID, info.Data)
	}
	if !accepts(info.Port) {
		t.Fatalf("nothing accepts connections on port %d", info.Port)
	}
	return info
}

func accepts(port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// deathBound is how soon after its supervisor dies the server must be gone.
// The requirement; measured, it takes tens of milliseconds.
const deathBound = 2 * time.Second

// waitServerGone polls, for at most deathBound, until the postmaster has
// exited and its port refuses connections, and returns how long that took.
func waitServerGone(t *testing.T, info parentInfo, since time.Time) time.Duration {
	t.Helper()
	for {
		gone, closed := !alive(info.PID), !accepts(info.Port)
		if gone && closed {
			return time.Since(since)
		}
		if time.Since(since) > deathBound {
			t.Fatalf("%v after the kill: postmaster %d alive=%v, port %d accepting=%v; the server must die within %v of its supervisor",
				time.Since(since).Round(time.Millisecond), info.PID, !gone, info.Port, !closed, deathBound)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// However bank-sim and its supervisor die, the PostgreSQL server dies with
// them, within deathBound. pg_ctl's detached postmaster outlived a SIGKILL
// of the supervisor by minutes; the postmaster is now the supervisor's own
// child with a parent-death signal.
func TestServerDiesWithItsSupervisor(t *testing.T) {
	t.Parallel()
	kill := func(pid int) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %d: %v", pid, err)
		}
	}
	cases := []struct {
		name string
		env  []string
		kill func(info parentInfo)
	}{
		{"SIGKILL of bank-sim alone", nil, func(i parentInfo) { kill(i.Parent.Process.Pid) }},
		{"SIGKILL of the supervisor alone", nil, func(i parentInfo) { kill(i.Sup) }},
		{"SIGKILL of bank-sim and the supervisor together", nil, func(i parentInfo) { kill(i.Sup); kill(i.Parent.Process.Pid) }},
		{"SIGKILL of the supervisor's process group", nil, func(i parentInfo) { kill(-i.Sup) }},
		{"SIGKILL of the supervisor after a crash restart", []string{"BANK_SIM_TEST_PARENT_CRASH=1"}, func(i parentInfo) { kill(i.Sup) }},
	}
	dir := warmCache(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := startFakeParent(t, dir, c.env...)
			t0 := time.Now()
			c.kill(info)
			d := waitServerGone(t, info, t0)
			t.Logf("TIMING server gone %v after the kill", d.Round(100*time.Microsecond))
			if !waitGone(5*time.Second, info.Sup) {
				t.Errorf("supervisor %d still running", info.Sup)
			}
		})
	}
	// The next run in that cache starts cleanly over whatever they left.
	s, _ := start(t, Options{CacheDir: dir})
	ping(t, s.adminURL)
}

// BenchmarkSupervisorKill measures the time from a SIGKILL of the
// supervisor to the postmaster's exit (ns/op; the server's start is not
// timed): go test ./postgres -run '^$' -bench SupervisorKill -benchtime 15x
func BenchmarkSupervisorKill(b *testing.B) {
	dir := warmCache(b)
	var ds []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		info := startFakeParent(b, dir)
		b.StartTimer()
		t0 := time.Now()
		syscall.Kill(info.Sup, syscall.SIGKILL)
		for alive(info.PID) {
			if time.Since(t0) > 10*time.Second {
				b.Fatalf("postmaster %d alive 10 s after its supervisor's SIGKILL", info.PID)
			}
			time.Sleep(200 * time.Microsecond)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		info.Parent.Process.Kill()
		info.Parent.Wait()
		b.StartTimer()
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(ds[len(ds)-1].Microseconds())/1000, "max-ms")
}
