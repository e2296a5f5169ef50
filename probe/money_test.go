package probe_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/probe"
)

// exactHTTP reads bank-sim's balances with GET /accounts/{id} as each
// account's owner (chidi's token reads the third account).
func exactHTTP(cfg *probe.Config, base string) {
	cfg.Third.Token = "token-chidi"
	cfg.Balances = &probe.HTTPBalances{Template: base + "/accounts/{id}", Field: "balanceKobo", Owner: cfg.Owner, Auth: cfg.Contract, Timeout: cfg.Timeout}
}

// exactSQL reads them from the bank's own database, read-only.
func exactSQL(cfg *probe.Config, sim *bankSim, query string) {
	cfg.Balances = &probe.SQLBalances{URL: sim.pool.Config().ConnConfig.ConnString(), Query: query, Timeout: cfg.Timeout}
}

func TestExactMoneyFromEachSource(t *testing.T) {
	for name, exact := range map[string]func(*probe.Config, *bankSim){
		"balances-url": func(c *probe.Config, s *bankSim) { exactHTTP(c, s.urls[0]) },
		"balances-sql": func(c *probe.Config, s *bankSim) { exactSQL(c, s, "SELECT id, balance_kobo FROM accounts") },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sim := startBankSim(t, simOptions{copies: 2})
			cfg := lesson(sim.urls...)
			exact(&cfg, sim)
			rep := runProbe(t, cfg)
			for _, c := range rep.Checks {
				if uncheckedByDefault[c.Name] && c.Status == probe.Skipped {
					continue
				}
				if c.Status != probe.Pass {
					t.Errorf("%s: %s, want PASS: %s", c.Name, c.Status, c.Reason)
				}
				if !strings.Contains(c.Money, "total ₦75,000 → ₦75,000") {
					t.Errorf("%s: the money was not read before and after: %q", c.Name, c.Money)
				}
			}
			if !rep.Capabilities.Exact {
				t.Errorf("capabilities %+v: want exact", rep.Capabilities)
			}
			if t.Failed() {
				t.Log("\n" + dump(rep))
			}
			l := sim.ledger(t)
			if b, _ := l.Balance(1); b != 5_000_000 || l.Total() != 7_500_000 {
				t.Errorf("after the probe and its restore: %s; want Ada back at ₦50,000", l.Line())
			}
		})
	}
}

// With exact balances and none in the answers, money that moved wrongly is
// found by the reads framing the check, not by the answers: against a
// read-compare-write transfer the drain's answers are each a 201 naming a
// transfer of its own, as a correct server's are, while the reads show that
// debits were lost. The same run without a balance source cannot size the
// drain, and says so instead of passing.
//
// Whether a drain loses a debit is a race: each drain's verdict is held
// against the truth in the bank's own ledger (a lost debit must fail, none
// must pass), until one has lost a debit, within a bound.
func TestExactReadsCatchWhatAnswersHide(t *testing.T) {
	t.Parallel()
	b, err := mistakes.Lookup("read-compare-write")
	if err != nil {
		t.Fatal(err)
	}
	sim := startBankSim(t, simOptions{bug: &b})
	cfg := lesson(sim.urls...)
	cfg.Contract.BalanceField = "" // the answers reveal no balance
	cfg.Only = []string{"drain"}
	cfg.Drain = 16

	blind := runProbe(t, cfg)
	if c, _ := blind.Check("drain"); c.Status != probe.Skipped {
		t.Fatalf("without any balance, drain: %s %q, want SKIPPED\n%s", c.Status, c.Reason, dump(blind))
	}

	exactSQL(&cfg, sim, "SELECT id, balance_kobo FROM accounts")
	const tries = 5
	for try := 1; try <= tries; try++ {
		cfg.Seed++
		rep := runProbe(t, cfg)
		c, _ := rep.Check("drain")
		if !lostDebit(sim.ledger(t)) {
			if c.Status != probe.Pass {
				t.Fatalf("drain %d lost no debit (the ledger adds up), yet: %s %q\n%s", try, c.Status, c.Reason, dump(rep))
			}
			continue
		}
		if c.Status != probe.Fail || !strings.Contains(c.Reason, "but the acknowledged transfers account for") {
			t.Fatalf("drain %d lost a debit: %s %q, want FAIL from the balance reads\n%s", try, c.Status, c.Reason, dump(rep))
		}
		if !strings.Contains(c.Reason, "debit(s) of this amount were lost, money created from nothing") {
			t.Errorf("the reason should say the debits were lost: %s", c.Reason)
		}
		// The answers alone show nothing wrong: one transfer per intent,
		// each with an id of its own.
		ids := map[string]bool{}
		for _, a := range c.Attempts {
			if a.Answer != nil && a.Answer.Receipt() {
				if ids[a.Answer.TransferID] {
					t.Errorf("transfer %s was named twice: the answers alone would show the mistake", a.Answer.TransferID)
				}
				ids[a.Answer.TransferID] = true
			}
		}
		t.Logf("drain %d: %s", try, c.Reason)
		return
	}
	t.Fatalf("%d drains of %d concurrent transfers through a read-compare-write transfer lost no debit: the race never happened, so nothing was tested", tries, cfg.Drain)
}

// lostDebit reports whether ada's balance is not her opening balance plus
// the credits minus the debits the bank's transfers record.
func lostDebit(l bank.Ledger) bool {
	want := int64(5_000_000)
	for _, tr := range l.Transfers {
		if tr.From == 1 {
			want -= tr.AmountKobo
		}
		if tr.To == 1 {
			want += tr.AmountKobo
		}
	}
	have, _ := l.Balance(1)
	return have != want
}

// With no balance anywhere, what the answers cannot decide is said so, and
// never counted as passed.
func TestWithoutBalancesTheUndecidableIsNotPassed(t *testing.T) {
	t.Parallel()
	sim := startBankSim(t, simOptions{})
	cfg := lesson(sim.urls...)
	cfg.Contract.BalanceField = ""
	rep := runProbe(t, cfg)
	want := map[string]probe.Status{"other-copy": probe.Skipped, "hang-up": probe.Unknown, "drain": probe.Skipped, "refused-then-moved": probe.Skipped}
	for n := range uncheckedByDefault {
		want[n] = probe.Skipped
	}
	for _, c := range rep.Checks {
		w, ok := want[c.Name]
		if !ok {
			w = probe.Pass
		}
		if c.Status != w {
			t.Errorf("%s: %s, want %s: %s", c.Name, c.Status, w, c.Reason)
		}
	}
	notMade := 0
	for _, c := range rep.Checks {
		if _, ok := want[c.Name]; ok {
			notMade++
		}
	}
	if rep.Passed != len(rep.Checks)-notMade || rep.NotMade != notMade || rep.Failed != 0 {
		t.Errorf("passed %d, not made %d, failed %d", rep.Passed, rep.NotMade, rep.Failed)
	}
	if !strings.HasPrefix(rep.Verdict, "PASS on what could be checked") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	if t.Failed() {
		t.Log("\n" + dump(rep))
	}
}

// The balance query runs read-only: a query that writes is refused by
// PostgreSQL, reported as a usage error, and writes nothing.
func TestBalanceQueryCannotWrite(t *testing.T) {
	t.Parallel()
	sim := startBankSim(t, simOptions{})
	cfg := lesson(sim.urls...)
	exactSQL(&cfg, sim, "UPDATE accounts SET balance_kobo = balance_kobo + 100 RETURNING id, balance_kobo")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := probe.Run(ctx, cfg)
	var ue *probe.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "read-only transaction") {
		t.Fatalf("err = %v, want a usage error about the read-only transaction", err)
	}
	if l := sim.ledger(t); l.Total() != 7_500_000 || len(l.Transfers) != 0 {
		t.Errorf("the bank changed: %s, %d transfers", l.Line(), len(l.Transfers))
	}
}
