package probe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/banksim/bank-sim/internal/browsertest"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	browsertest.Close()
	os.Exit(code)
}

// bankSim is bank-sim's own server, the way serve runs it, on real
// sockets of 127.0.0.1 over a fresh lesson bank: copies servers (each its
// own handler, as separate processes would have) sharing one database.
type bankSim struct {
	urls []string
	pool *pgxpool.Pool
}

type simOptions struct {
	copies int
	bug    *mistakes.Bug
	// lockTTL is the key store's lock; short, so that a key abandoned by a
	// request whose client went away is taken over well within the probe's
	// settle time (and the tests spend little time waiting for it).
	lockTTL time.Duration
	// skew sets copy i's clock i×skew ahead of the machine's (Handler.Now):
	// app servers whose clocks disagree, as in a real deployment.
	skew time.Duration
	// wrap, when set, stands in front of each copy's HTTP server.
	wrap func(http.Handler) http.Handler
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
	for i := range o.copies {
		h := &idem.Handler{DB: pool, Store: &idem.Store{LockTTL: o.lockTTL}}
		if ahead := time.Duration(i) * o.skew; ahead != 0 {
			h.Now = func() time.Time { return time.Now().Add(ahead) }
		}
		if o.bug != nil {
			o.bug.Apply(h)
		}
		var served http.Handler = api.NewServer(api.Config{Handler: h, Tokens: api.DemoTokens()})
		if o.wrap != nil {
			served = o.wrap(served)
		}
		srv := httptest.NewServer(served)
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

// lesson is a probe of urls with the lesson's contract, users and accounts,
// and bank-sim's promise of byte-for-byte replays.
func lesson(urls ...string) probe.Config {
	c := probe.LessonContract()
	c.ExactReplays = true // bank-sim's own promise (issue 7): replays are the first answer's bytes
	return probe.Config{
		URLs:     urls,
		Contract: c,
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
		if c.Status != probe.Pass && !(c.Status == probe.Skipped && uncheckedByDefault[c.Name]) {
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

// Interrupted while a transfer is in flight — the client has hung up and the
// server finishes the work anyway — the probe settles that intent with its
// key before the restore, so the restore sends back the money the target
// really moved, not only what the probe had been told.
func TestAnInterruptedProbeCountsTheTransferItHadInFlight(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := lesson()
	cfg.Only = []string{"hang-up"}
	// The hang-up check's amount: the base plus its place among the checks.
	hangUp := fmt.Sprintf(`"amountKobo":%d`, probe.DefaultAmount+11)
	var interrupted sync.Once
	sim := startBankSim(t, simOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if strings.Contains(string(body), hangUp) {
				// Ctrl-C, while the first round's request is at the server.
				interrupted.Do(cancel)
			}
			next.ServeHTTP(w, r)
		})
	}})
	cfg.URLs = sim.urls
	rep, err := probe.Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if rep == nil || len(rep.Checks) != 0 || rep.Restore == nil || !rep.Restore.OK {
		t.Fatalf("report %+v, restore %+v", rep, rep.Restore)
	}
	l := sim.ledger(t)
	if len(l.Transfers) != 3 {
		t.Errorf("%d transfers, want 3 (the preflight's, the interrupted round's, the restore): %s", len(l.Transfers), l.Line())
	}
	if b, _ := l.Balance(1); b != 5_000_000 {
		t.Errorf("after a probe interrupted with a transfer in flight: %s; want Ada back at ₦50,000 (restore: %s)", l.Line(), rep.Restore.Result)
	}
}

// A run the payer's balance cannot pay for is a usage error found after the
// preflight's transfer: that transfer goes back, and the message says the
// balance the account held before it.
func TestAProbeTheAccountCannotPayForLeavesNothingMoved(t *testing.T) {
	t.Parallel()
	sim := startBankSim(t, simOptions{})
	cfg := lesson(sim.urls...)
	cfg.HangUps = 500 // 500 transfers of ₦100.11: more than Ada's ₦50,000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := probe.Run(ctx, cfg)
	var ue *probe.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "ada's account 1 held ₦50,000, and the checks need about") ||
		!strings.Contains(err.Error(), "The preflight's transfer: bola sent ₦100 back to ada: 201") {
		t.Fatalf("err = %v, want a usage error saying Ada's balance and the preflight's transfer sent back", err)
	}
	l := sim.ledger(t)
	if b, _ := l.Balance(1); b != 5_000_000 || len(l.Transfers) != 2 {
		t.Errorf("after a run refused for want of money: %s; want Ada at ₦50,000 after the preflight and its return", l.Line())
	}
}
