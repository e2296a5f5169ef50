package probe_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// uncheckedByDefault are the checks that need a flag the tests' plain runs
// do not give (--restart, --db-proxy): SKIPPED there, naming it.
var uncheckedByDefault = map[string]bool{"restart": true, "db-faults": true}

// onlyCheck probes urls with one check and returns its result.
func onlyCheck(t *testing.T, cfg probe.Config, name string) (probe.Result, *probe.Report) {
	t.Helper()
	cfg.Only = []string{name}
	rep := runProbe(t, cfg)
	res, ok := rep.Check(name)
	if !ok {
		t.Fatalf("check %s was not made:\n%s", name, dump(rep))
	}
	return res, rep
}

// wantFail asserts the check failed for the class's reason.
func wantFail(t *testing.T, res probe.Result, rep *probe.Report, explains string) {
	t.Helper()
	if res.Status != probe.Fail || !strings.Contains(res.Reason, explains) {
		t.Fatalf("%s is %s (%s), want FAIL saying %q\n%s", res.Name, res.Status, res.Reason, explains, dump(rep))
	}
	t.Logf("%s: %s", res.Name, res.Reason)
}

func wantPass(t *testing.T, res probe.Result, rep *probe.Report) {
	t.Helper()
	if res.Status != probe.Pass {
		t.Fatalf("%s is %s against the correct target, want PASS: %s\n%s", res.Name, res.Status, res.Reason, dump(rep))
	}
}

// checkLedger asserts the bank conserved its money and Ada ended where she
// started (the probe's restore).
func checkLedger(t *testing.T, l bank.Ledger) {
	t.Helper()
	if l.Total() != 7_500_000 {
		t.Errorf("total %d after the probe, want 7500000", l.Total())
	}
}

// Bola sends Ada's key with Ada's exact body: a store that finds answers by
// the key text alone (serve --bug unscoped-keys) hands Bola Ada's 201.
func TestCrossUserReplay(t *testing.T) {
	t.Parallel()
	unscoped := mustBug(t, "unscoped-keys")
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{})
		res, rep := onlyCheck(t, lesson(sim.urls...), "cross-user-replay")
		wantPass(t, res, rep)
		checkLedger(t, sim.ledger(t))
	})
	t.Run("refused-as-a-fresh-key-is", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{notYours: 422})
		res, rep := onlyCheck(t, lesson(ref.url()), "cross-user-replay")
		wantPass(t, res, rep)
	})
	t.Run("tells-the-key-exists", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{keyTextOnly: true})
		res, rep := onlyCheck(t, lesson(ref.url()), "cross-user-replay")
		wantFail(t, res, rep, "but a key of bola's own gets 404 account_not_found for the same body")
	})
	t.Run("unscoped-keys", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{bug: &unscoped})
		res, rep := onlyCheck(t, lesson(sim.urls...), "cross-user-replay")
		wantFail(t, res, rep, "leaks transfer")
		checkLedger(t, sim.ledger(t))
	})
}

func mustBug(t *testing.T, name string) mistakes.Bug {
	t.Helper()
	b, err := mistakes.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A transfer refused for want of money, retried with its key after money
// arrived: a target that stores only its successes pays it.
func TestRefusedThenMoved(t *testing.T) {
	t.Parallel()
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		sim := startBankSim(t, simOptions{})
		res, rep := onlyCheck(t, lesson(sim.urls...), "refused-then-moved")
		wantPass(t, res, rep)
		checkLedger(t, sim.ledger(t))
	})
	t.Run("correct-reference", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{})
		res, rep := onlyCheck(t, lesson(ref.url()), "refused-then-moved")
		wantPass(t, res, rep)
	})
	t.Run("stores-only-2xx", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{only2xx: true})
		res, rep := onlyCheck(t, lesson(ref.url()), "refused-then-moved")
		wantFail(t, res, rep, "the refusal (422 insufficient_funds) was not stored as the key's answer")
		if ref.total() != 7_500_000 {
			t.Errorf("total %d, want 7500000", ref.total())
		}
	})
}

// restartCommand is a shell command that restarts ref the way a team's
// "systemctl restart api" restarts their server, and returns when it is
// done: it asks through one named pipe and waits for the answer on another.
func restartCommand(t *testing.T, ref *refServer) string {
	t.Helper()
	dir := t.TempDir()
	req, ack := filepath.Join(dir, "restart"), filepath.Join(dir, "done")
	for _, p := range []string{req, ack} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			b, err := os.ReadFile(req) // blocks until the command writes
			select {
			case <-done:
				return
			default:
			}
			msg := "restarted"
			if err != nil {
				msg = err.Error()
			} else if err := ref.restart(); err != nil {
				msg = err.Error()
			}
			_ = os.WriteFile(ack, []byte(msg+" ("+strings.TrimSpace(string(b))+")\n"), 0o600)
		}
	}()
	t.Cleanup(func() {
		close(done)
		// Opening the pipe for writing lets the reader's open return.
		if f, err := os.OpenFile(req, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	return fmt.Sprintf("echo restart > %s && cat %s", req, ack)
}

// A retry after the server restarted: a target whose keys live in its
// process's memory forgets them, and the retry moves the money again.
func TestRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		durable bool
	}{{"keys-in-memory", false}, {"correct", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ref := startRef(t, &refServer{durable: tc.durable})
			cfg := lesson(ref.url())
			cfg.RestartCommand = restartCommand(t, ref)
			cfg.Restart = probe.ShellRestart(cfg.RestartCommand, 10*time.Second)
			cfg.WaitFor = 5 * time.Second
			res, rep := onlyCheck(t, cfg, "restart")
			if n := ref.restarted(); n != 1 {
				t.Errorf("the target was restarted %d times, want 1\n%s", n, dump(rep))
			}
			if tc.durable {
				wantPass(t, res, rep)
			} else {
				wantFail(t, res, rep, "the retry after the restart made another transfer")
			}
			if !strings.Contains(strings.Join(res.Evidence, "\n"), "--restart printed: restarted (restart)") {
				t.Errorf("the restart's output is not in the evidence:\n%s", dump(rep))
			}
			if ref.total() != 7_500_000 {
				t.Errorf("total %d, want 7500000", ref.total())
			}
		})
	}
	t.Run("without-restart", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{})
		res, rep := onlyCheck(t, lesson(ref.url()), "restart")
		if res.Status != probe.Skipped || !strings.Contains(res.Reason, "Give --restart CMD") {
			t.Fatalf("restart without --restart is %s (%s), want SKIPPED naming the flag\n%s", res.Status, res.Reason, dump(rep))
		}
	})
	t.Run("command-fails", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{})
		cfg := lesson(ref.url())
		cfg.RestartCommand = "echo no such unit >&2; exit 5"
		cfg.Restart = probe.ShellRestart(cfg.RestartCommand, 10*time.Second)
		res, rep := onlyCheck(t, cfg, "restart")
		if res.Status != probe.Unknown || !strings.Contains(res.Reason, "exit status 5") || !strings.Contains(strings.Join(res.Evidence, "\n"), "no such unit") {
			t.Fatalf("a failing --restart is %s (%s), want UNKNOWN with its exit status and output\n%s", res.Status, res.Reason, dump(rep))
		}
	})
	t.Run("command-hangs", func(t *testing.T) {
		t.Parallel()
		out, err := probe.ShellRestart("echo going; sleep 30", 200*time.Millisecond)(context.Background())
		if err == nil || !strings.Contains(err.Error(), "did not finish within --restart-timeout 200ms") || out != "going" {
			t.Fatalf("a hanging --restart: %q, %v; want killed at the bound with its output kept", out, err)
		}
	})
}

// startBankSimThroughDBProxy is bank-sim's server whose database pool
// connects to listen, a free port of 127.0.0.1 where the probe's database
// fault proxy will listen, in front of the test's PostgreSQL (returned as
// upstream).
func startBankSimThroughDBProxy(t *testing.T, bug *mistakes.Bug, mode ...pgx.QueryExecMode) (sim *bankSim, listen, upstream string) {
	t.Helper()
	direct := pgtest.NewBank(t, 8)
	cfg := direct.Config()
	upstream = net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen = ln.Addr().String()
	_ = ln.Close() // the probe listens here
	port := ln.Addr().(*net.TCPAddr).Port
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", uint16(port), nil
	cfg.MaxConnIdleTime = time.Minute
	for _, m := range mode {
		cfg.ConnConfig.DefaultQueryExecMode = m
	}
	viaProxy, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(viaProxy.Close)
	h := &idem.Handler{DB: viaProxy, Store: &idem.Store{LockTTL: 500 * time.Millisecond}}
	if bug != nil {
		bug.Apply(h)
	}
	srv := httptest.NewServer(api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens()}))
	t.Cleanup(srv.Close)
	return &bankSim{urls: []string{srv.URL}, pool: direct}, listen, upstream
}

// The database fails at the commit, before it or after it: a server that
// stores the 500 of a passing database failure as the key's answer replays
// it forever (serve --bug stored-5xx), where the correct one ends each
// intent as one transfer.
func TestDBFaults(t *testing.T) {
	t.Parallel()
	stored5xx, second := mustBug(t, "stored-5xx"), mustBug(t, "second-transaction")
	for _, tc := range []struct {
		name     string
		bug      *mistakes.Bug
		explains string // "" for the correct target
	}{
		{"correct", nil, ""},
		{"stored-5xx", &stored5xx, "a server error was stored as the key's final answer"},
		// The transfer commits, then its answer in a transaction of its own:
		// the cut before the second COMMIT, or the first COMMIT's answer
		// lost, and the retry transfers again.
		{"second-transaction", &second, "a transfer ran again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim, listen, upstream := startBankSimThroughDBProxy(t, tc.bug)
			cfg := lesson(sim.urls...)
			cfg.DBListen, cfg.DBUpstream = listen, upstream
			cfg.LockTTL = 500 * time.Millisecond
			cfg.Settle = 1500 * time.Millisecond
			res, rep := onlyCheck(t, cfg, "db-faults")
			if tc.explains == "" {
				wantPass(t, res, rep)
			} else {
				wantFail(t, res, rep, tc.explains)
			}
			if !strings.Contains(dump(rep), "the database connection was cut before COMMIT no. 1") ||
				!strings.Contains(dump(rep), "PostgreSQL committed COMMIT no. 1, and its answer was dropped") {
				t.Errorf("the faults did not both fire:\n%s", dump(rep))
			}
			checkLedger(t, sim.ledger(t))
		})
	}
	t.Run("without-db-proxy", func(t *testing.T) {
		t.Parallel()
		ref := startRef(t, &refServer{})
		res, rep := onlyCheck(t, lesson(ref.url()), "db-faults")
		if res.Status != probe.Skipped || !strings.Contains(res.Reason, "Give --db-proxy LISTEN=UPSTREAM") {
			t.Fatalf("db-faults without --db-proxy is %s (%s), want SKIPPED naming the flag\n%s", res.Status, res.Reason, dump(rep))
		}
	})
}

// A driver that sends every statement as a simple query, COMMIT included
// (node-postgres does): the proxy fails its commits as it fails pgx's
// prepared ones.
func TestDBFaultsSimpleProtocol(t *testing.T) {
	pgtest.Exhaustive(t)
	t.Parallel()
	stored5xx := mustBug(t, "stored-5xx")
	for _, bug := range []*mistakes.Bug{nil, &stored5xx} {
		t.Run(fmt.Sprint(bug != nil), func(t *testing.T) {
			t.Parallel()
			sim, listen, upstream := startBankSimThroughDBProxy(t, bug, pgx.QueryExecModeSimpleProtocol)
			cfg := lesson(sim.urls...)
			cfg.DBListen, cfg.DBUpstream = listen, upstream
			cfg.LockTTL = 500 * time.Millisecond
			cfg.Settle = 1500 * time.Millisecond
			res, rep := onlyCheck(t, cfg, "db-faults")
			if bug == nil {
				wantPass(t, res, rep)
			} else {
				wantFail(t, res, rep, "a server error was stored as the key's final answer")
			}
			if !strings.Contains(dump(rep), "the database connection was cut before COMMIT no. 1") {
				t.Errorf("the cut did not fire:\n%s", dump(rep))
			}
			checkLedger(t, sim.ledger(t))
		})
	}
}
