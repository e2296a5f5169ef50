package zoo_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/banksim/bank-sim/probe/judge"
)

// nodePath is where Debian's node-express puts its modules.
const nodePath = "/usr/share/nodejs"

// express is testdata/zoo/express/server.js run by node on one port of
// 127.0.0.1, restartable on it.
type express struct {
	t    *testing.T
	port int
	bank string // BANK_FILE: the balances, kept across a restart
	cmd  *exec.Cmd
}

// startExpress runs the express member, or skips the test saying what is
// missing.
func startExpress(t *testing.T) *express {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: apt-get install -y nodejs node-express (.ci/run does)")
	}
	if _, err := os.Stat(filepath.Join(nodePath, "express", "package.json")); err != nil {
		t.Skipf("express is not in %s: apt-get install -y node-express (.ci/run does)", nodePath)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &express{t: t, port: ln.Addr().(*net.TCPAddr).Port, bank: filepath.Join(t.TempDir(), "bank.json")}
	_ = ln.Close()
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.stop() })
	return e
}

func (e *express) url() string { return fmt.Sprintf("http://127.0.0.1:%d", e.port) }

// start runs node and waits, bounded, for it to say it listens.
func (e *express) start() error {
	script, err := filepath.Abs("../../testdata/zoo/express/server.js")
	if err != nil {
		return err
	}
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath, fmt.Sprintf("PORT=%d", e.port), "BANK_FILE="+e.bank)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	e.cmd = cmd
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "listening on") {
				ready <- s.Text()
			}
		}
		close(ready)
	}()
	select {
	case line, ok := <-ready:
		if !ok {
			return fmt.Errorf("node %s exited before it listened: %v", script, cmd.Wait())
		}
		e.t.Logf("express: %s", line)
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("node %s did not listen on port %d within 30 s", script, e.port)
	}
}

// stop ends the node process this test started (by its pid), and waits.
func (e *express) stop() {
	if e.cmd == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = e.cmd.Process.Kill()
		<-done
	}
	e.cmd = nil
}

// restart is a redeploy: the process stops and starts on the same port.
func (e *express) restart() error {
	e.stop()
	return e.start()
}

// expressClasses are what probe fails the express member on: each check
// names one of its middleware's defects (server.js's header), and every
// other check passes.
var expressClasses = map[string]string{
	"replay":              "the members in another order was answered 422 IDEMPOTENCY_FINGERPRINT_MISMATCH",
	"other-user-same-key": "was refused as a reused key",
	"no-key":              "a transfer without a key was made",
	"cross-user-replay":   "leaks transfer",
	"refused-then-moved":  "was not stored as the key's answer",
	"restart":             "the retry after the restart made another transfer",
}

// The express member, judged by both: probe fails it on each of its
// defects by name and passes the rest; chaos --target, told the
// middleware's refusal of a reused key (--key-refusal
// 422:IDEMPOTENCY_FINGERPRINT_MISMATCH), breaks the rule of each defect it
// can reach (keys shared by all users, a keyless transfer made, a reordered
// body refused, a refusal not stored), so the two agree on each.
func TestExpressMemberFailsBothByName(t *testing.T) {
	pgtest.Exhaustive(t)
	t.Parallel()
	refusal, err := judge.ParseRule("422:IDEMPOTENCY_FINGERPRINT_MISMATCH")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("probe", func(t *testing.T) {
		t.Parallel()
		e := startExpress(t)
		cfg := probeConfig(t, []string{e.url()}, e.restart)
		cfg.Contract.KeyRefusals = []judge.Rule{refusal}
		cfg.Restart, cfg.WaitFor = probe.ShellRestart(cfg.RestartCommand, time.Minute), 30*time.Second
		// refused-then-moved, failed, leaves the money it moved where it
		// went: Ada's account is then too poor for restart and drain, so
		// it runs on its own, after the others (on a seed of its own: the
		// first run's keys are in the store).
		cfg.Skip = []string{"refused-then-moved"}
		rep := runProbe(t, cfg)
		only := probeConfig(t, []string{e.url()}, nil)
		only.Contract.KeyRefusals, only.Seed, only.Only = cfg.Contract.KeyRefusals, 43, []string{"refused-then-moved"}
		alone := runProbe(t, only)
		for _, c := range append(rep.Checks, alone.Checks...) {
			want, named := expressClasses[c.Name]
			switch {
			case c.Status == probe.Skipped && (c.Name == "db-faults" || c.Name == "other-copy" || c.Name == "refused-then-moved"):
				// Not given --db-proxy, a second copy; refused-then-moved: in
				// its own run.
			case named && (c.Status != probe.Fail || !strings.Contains(c.Reason, want)):
				t.Errorf("%s: %s (%s), want FAIL saying %q", c.Name, c.Status, c.Reason, want)
			case !named && c.Status != probe.Pass:
				t.Errorf("%s: %s (%s), want PASS", c.Name, c.Status, c.Reason)
			case named:
				t.Logf("%s: %s", c.Name, c.Reason)
			}
		}
		if t.Failed() {
			t.Log("\n" + dump(rep) + dump(alone))
		}
	})
	t.Run("chaos", func(t *testing.T) {
		t.Parallel()
		e := startExpress(t)
		ct := chaosTarget(e.url())
		ct.Contract.KeyRefusals = []judge.Rule{refusal}
		_, res := runChaos(t, ct)
		// Each defect chaos --target can reach without a restart or a
		// second copy, by the rule that names it.
		want := []string{chaos.KindWrong, chaos.KindCrossUser, chaos.KindNoKey, chaos.KindReorderedRefused, chaos.KindRefusedMoved}
		var missed []string
		for _, k := range want {
			if res.ByKind[k] == 0 {
				missed = append(missed, k)
			}
		}
		if res.Verdict() != chaos.Invalid || len(missed) > 0 {
			logViolations(t, res)
			t.Fatalf("chaos --target against the express member: %s with %v; want INVALID on each of %v (missed %v)", res.Verdict(), res.ByKind, want, missed)
		}
	})
}
