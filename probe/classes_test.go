package probe_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/zoo"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/jackc/pgx/v5"
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
		notYours422 := zoo.Correct
		notYours422.Defect.NotYours = 422
		ref, _ := startZoo(t, notYours422)
		res, rep := onlyCheck(t, lesson(ref.URL()), "cross-user-replay")
		wantPass(t, res, rep)
	})
	t.Run("tells-the-key-exists", func(t *testing.T) {
		t.Parallel()
		ref, _ := startZoo(t, zoo.SharedKeys)
		res, rep := onlyCheck(t, lesson(ref.URL()), "cross-user-replay")
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
		ref, _ := startZoo(t, zoo.Correct)
		res, rep := onlyCheck(t, lesson(ref.URL()), "refused-then-moved")
		wantPass(t, res, rep)
	})
	t.Run("stores-only-2xx", func(t *testing.T) {
		t.Parallel()
		ref, bank := startZoo(t, zoo.Only2xx)
		res, rep := onlyCheck(t, lesson(ref.URL()), "refused-then-moved")
		wantFail(t, res, rep, "the refusal (422 insufficient_funds) was not stored as the key's answer")
		if bank.Total() != 7_500_000 {
			t.Errorf("total %d, want 7500000", bank.Total())
		}
	})
}

// A whole probe run against a target that stores only its successes: the
// refused transfer that its retry wrongly moves takes all of ada's money,
// and the check sends as much back, so every later check (the restart's,
// the drain's) finds the balances it expects and passes: only
// refused-then-moved fails.
func TestRefusedThenMovedLeavesLaterChecksUnaffected(t *testing.T) {
	t.Parallel()
	ref, bank := startZoo(t, zoo.Only2xx)
	cfg := lesson(ref.URL())
	cfg.RestartCommand = restartCommand(t, ref)
	cfg.Restart = probe.ShellRestart(cfg.RestartCommand, 10*time.Second)
	cfg.WaitFor = 5 * time.Second
	rep := runProbe(t, cfg)
	for _, c := range rep.Checks {
		switch {
		case c.Name == "refused-then-moved":
			if c.Status != probe.Fail {
				t.Errorf("refused-then-moved is %s, want FAIL: %s", c.Status, c.Reason)
			}
		case c.Status == probe.Skipped && (c.Name == "db-faults" || c.Name == "other-copy"): // no --db-proxy, one URL
		case c.Status != probe.Pass:
			t.Errorf("%s is %s, want PASS (only refused-then-moved is this target's defect): %s", c.Name, c.Status, c.Reason)
		}
	}
	if t.Failed() {
		t.Log("\n" + dump(rep))
	}
	if bank.Total() != 7_500_000 {
		t.Errorf("total %d, want 7500000", bank.Total())
	}
}

// A retry after the server restarted: a target whose keys live in its
// process's memory forgets them, and the retry moves the money again.
func TestRestart(t *testing.T) {
	t.Parallel()
	for _, m := range []zoo.Member{zoo.MemoryKeys, zoo.Correct} {
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			ref, bank := startZoo(t, m)
			cfg := lesson(ref.URL())
			cfg.RestartCommand = restartCommand(t, ref)
			cfg.Restart = probe.ShellRestart(cfg.RestartCommand, 10*time.Second)
			cfg.WaitFor = 5 * time.Second
			res, rep := onlyCheck(t, cfg, "restart")
			if n := ref.Restarts(); n != 1 {
				t.Errorf("the target was restarted %d times, want 1\n%s", n, dump(rep))
			}
			if m.Class == "" {
				wantPass(t, res, rep)
			} else {
				wantFail(t, res, rep, "the retry after the restart made another transfer")
			}
			if !strings.Contains(strings.Join(res.Evidence, "\n"), "--restart printed: restarted (restart)") {
				t.Errorf("the restart's output is not in the evidence:\n%s", dump(rep))
			}
			if bank.Total() != 7_500_000 {
				t.Errorf("total %d, want 7500000", bank.Total())
			}
		})
	}
	t.Run("without-restart", func(t *testing.T) {
		t.Parallel()
		ref, _ := startZoo(t, zoo.Correct)
		res, rep := onlyCheck(t, lesson(ref.URL()), "restart")
		if res.Status != probe.Skipped || !strings.Contains(res.Reason, "Give --restart CMD") {
			t.Fatalf("restart without --restart is %s (%s), want SKIPPED naming the flag\n%s", res.Status, res.Reason, dump(rep))
		}
	})
	t.Run("command-fails", func(t *testing.T) {
		t.Parallel()
		ref, _ := startZoo(t, zoo.Correct)
		cfg := lesson(ref.URL())
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
func startBankSimThroughDBProxy(t *testing.T, bug *mistakes.Bug, mode ...pgx.QueryExecMode) (*bankSim, string, string) {
	t.Helper()
	direct := pgtest.NewBank(t, 8)
	viaProxy, listen, upstream := pgtest.ThroughPort(t, direct, mode...)
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
		ref, _ := startZoo(t, zoo.Correct)
		res, rep := onlyCheck(t, lesson(ref.URL()), "db-faults")
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
