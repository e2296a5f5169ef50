package probe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// bankSim is bank-sim's own server, the way serve runs it, on real
// sockets of 127.0.0.1 over a fresh lesson bank: copies servers (each its
// own handler, as separate processes would have) sharing one database.
type bankSim struct {
	urls []string
	pool *pgxpool.Pool
}

type simOptions struct {
	copies int
	bug    *idem.Bug
	// lockTTL is the key store's lock; short, so that a key abandoned by a
	// request whose client went away is taken over well within the probe's
	// settle time (and the tests spend little time waiting for it).
	lockTTL time.Duration
}

func startBankSim(t *testing.T, o simOptions) *bankSim {
	t.Helper()
	if o.copies == 0 {
		o.copies = 1
	}
	if o.lockTTL == 0 {
		o.lockTTL = 500 * time.Millisecond
	}
	pool := pgtest.NewBank(t, 16)
	s := &bankSim{pool: pool}
	for range o.copies {
		h := &idem.Handler{DB: pool, Store: &idem.Store{LockTTL: o.lockTTL}}
		if o.bug != nil {
			o.bug.Apply(h)
		}
		srv := httptest.NewServer(api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens()}))
		t.Cleanup(srv.Close)
		s.urls = append(s.urls, srv.URL)
	}
	return s
}

// ledger reads the bank's balances and transfer count.
func (s *bankSim) ledger(t *testing.T) bank.Ledger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := bank.ReadLedger(ctx, s.pool)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lesson is a probe of urls with the lesson's contract, users and accounts.
func lesson(urls ...string) probe.Config {
	return probe.Config{
		URLs:     urls,
		Contract: probe.LessonContract(),
		Payer:    probe.User{Name: "ada", Token: "token-ada", Account: "1"},
		Payee:    probe.User{Name: "bola", Token: "token-bola", Account: "2"},
		Third:    probe.User{Name: "chidi", Account: "3"},
		Seed:     42,
		Timeout:  5 * time.Second,
		Settle:   4 * time.Second,
	}
}

func runProbe(t *testing.T, cfg probe.Config) *probe.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := probe.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("probe: %v", err)
	}
	return rep
}

// dump is the report as a person reads it, for failure messages.
func dump(rep *probe.Report) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		fmt.Fprintf(&b, "%s %s (%s): %s\n", c.Status, c.Name, time.Duration(c.Duration).Round(time.Millisecond), c.Reason)
		for _, e := range c.Evidence {
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	if rep.Restore != nil {
		fmt.Fprintf(&b, "restore: %s\n", rep.Restore.Result)
	}
	fmt.Fprintf(&b, "verdict: %s (%s)\n", rep.Verdict, time.Duration(rep.Duration))
	return b.String()
}

func TestEveryCheckPassesAgainstBankSim(t *testing.T) {
	t.Parallel()
	sim := startBankSim(t, simOptions{copies: 2})
	rep := runProbe(t, lesson(sim.urls...))
	t.Log("\n" + dump(rep))
	for _, c := range rep.Checks {
		if c.Status != probe.Pass {
			t.Errorf("%s: %s, want PASS: %s", c.Name, c.Status, c.Reason)
		}
	}
	if len(rep.Checks) != len(probe.Checks()) {
		t.Errorf("%d checks made, want all %d", len(rep.Checks), len(probe.Checks()))
	}
	l := sim.ledger(t)
	if l.Total() != 7_500_000 {
		t.Errorf("total %d after the probe, want 7500000", l.Total())
	}
}

// Interrupted after its first check, the probe stops, and still sends the
// money it moved back.
func TestAnInterruptedProbeSendsTheMoneyBack(t *testing.T) {
	t.Parallel()
	sim := startBankSim(t, simOptions{})
	cfg := lesson(sim.urls...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.OnCheck = func(probe.Result) { cancel() }
	rep, err := probe.Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Checks) != 1 || rep.Restore == nil || !rep.Restore.OK {
		t.Fatalf("report %+v", rep)
	}
	l := sim.ledger(t)
	if b, _ := l.Balance(1); b != 5_000_000 || len(l.Transfers) < 3 {
		t.Errorf("after an interrupted probe: %s; want Ada back at ₦50,000 after its transfers", l.Line())
	}
}
