package chaos_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
)

func receipt(id, from, to, amount, balance int64) chaos.Bytes {
	b, _ := json.Marshal(bank.Receipt{TransferID: id, From: from, To: to, AmountKobo: amount, BalanceKobo: balance})
	return b
}

// goodHistory is a small valid history: one transfer that succeeded after a
// lost response and a replay, and one refusal.
func goodHistory() *chaos.History {
	refusal := bank.Reject(422, bank.CodeInsufficientFunds, "The balance is too low for this transfer")
	return &chaos.History{
		Seed: 1,
		Opening: []bank.Account{
			{ID: 1, OwnerID: 1, Holder: "Acct1 Chaos", Status: "active", BalanceKobo: 10_000},
			{ID: 2, OwnerID: 2, Holder: "Acct2 Chaos", Status: "active", BalanceKobo: 5_000},
		},
		Intents: []chaos.Intent{{
			Index: 0, Label: "intent-0", UserID: 1, Key: "chaos-key-0000000000", Outcome: chaos.SeenOK,
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000},
			Attempts: []chaos.Attempt{
				{N: 1, Phase: chaos.PhaseFault, Fault: "lose-response", StartNs: 10, EndNs: 20, Error: "timed out", Seen: chaos.SeenUnknown},
				{N: 2, Phase: chaos.PhaseFault, StartNs: 30, EndNs: 40, Status: 201, Replayed: true, Body: receipt(1, 1, 2, 1_000, 9_000), Seen: chaos.SeenOK},
			},
		}, {
			Index: 1, Label: "intent-1", UserID: 2, Key: "chaos-key-0000000001", Outcome: chaos.SeenRejected,
			Request: bank.TransferRequest{From: 2, To: 1, AmountKobo: 500},
			Attempts: []chaos.Attempt{
				{N: 1, Phase: chaos.PhaseFault, StartNs: 50, EndNs: 60, Status: 422, Body: chaos.Bytes(refusal.Body), Seen: chaos.SeenRejected},
			},
		}},
		Audits: []chaos.Snapshot{{AtNs: 5, Balances: []int64{10_000, 5_000}}, {AtNs: 45, Balances: []int64{9_000, 6_000}}},
		Final: bank.Ledger{
			Accounts: []bank.Account{
				{ID: 1, OwnerID: 1, Holder: "Acct1 Chaos", Status: "active", BalanceKobo: 9_000},
				{ID: 2, OwnerID: 2, Holder: "Acct2 Chaos", Status: "active", BalanceKobo: 6_000},
			},
			Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 1_000, Intent: "intent-0"}},
		},
		Duration: 100,
	}
}

func kinds(res chaos.Result) []string {
	var out []string
	for k := range res.ByKind {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestCheckerAcceptsAGoodHistory(t *testing.T) {
	t.Parallel()
	res := chaos.Check(goodHistory())
	if !res.Valid() {
		t.Fatalf("violations in a good history: %+v", res.Violations)
	}
	if s := res.Stats; s.OK != 1 || s.Rejected != 1 || s.Replays != 1 || s.Transfers != 1 {
		t.Errorf("stats %+v", s)
	}
}

// Each bad history breaks exactly one rule, and the checker names it.
func TestCheckerFlagsEachViolationKind(t *testing.T) {
	t.Parallel()
	cases := map[string]func(h *chaos.History){
		chaos.KindTotal: func(h *chaos.History) { h.Audits[1].Balances = []int64{9_000, 7_000} },
		chaos.KindNegative: func(h *chaos.History) {
			h.Audits[1].Balances = []int64{-1_000, 16_000}
		},
		chaos.KindTwice: func(h *chaos.History) {
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 2, From: 1, To: 2, AmountKobo: 1_000, Intent: "intent-0"})
			h.Final.Accounts[0].BalanceKobo, h.Final.Accounts[1].BalanceKobo = 8_000, 7_000
		},
		chaos.KindAckMissing: func(h *chaos.History) {
			// Told transfer 1, which belongs to someone else.
			h.Final.Transfers[0].Intent = "intent-9"
		},
		chaos.KindRejected: func(h *chaos.History) {
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 2, From: 2, To: 1, AmountKobo: 500, Intent: "intent-1"})
			h.Final.Accounts[0].BalanceKobo, h.Final.Accounts[1].BalanceKobo = 9_500, 5_500
		},
		chaos.KindReplay: func(h *chaos.History) {
			a := h.Intents[0].Attempts[1]
			a.N, a.Body = 3, receipt(1, 1, 2, 1_000, 1)
			h.Intents[0].Attempts = append(h.Intents[0].Attempts, a)
		},
		chaos.KindStuckKey: func(h *chaos.History) { h.StuckKeys = []string{"1/chaos-key-0000000000"} },
		chaos.KindUnresolved: func(h *chaos.History) {
			h.Intents[1].Outcome = chaos.SeenUnknown
			h.Intents[1].Attempts[0] = chaos.Attempt{N: 1, Phase: chaos.PhaseHeal, Status: 500, Replayed: true, Seen: chaos.SeenUnknown}
		},
		chaos.KindLedger: func(h *chaos.History) {
			h.Final.Accounts[0].BalanceKobo, h.Final.Accounts[1].BalanceKobo = 8_000, 7_000
		},
		chaos.KindKeyLost: func(h *chaos.History) {
			// PostgreSQL was killed; intent-0 was told 201, but its key is gone.
			h.Crashes = []chaos.Crash{{AfterIntent: 1, AtNs: 42, UpNs: 44}}
			h.CompletedKeys = []string{"2/chaos-key-0000000001"}
		},
	}
	if len(cases) != len(chaos.Kinds()) {
		t.Fatalf("%d cases for %d kinds", len(cases), len(chaos.Kinds()))
	}
	for kind, spoil := range cases {
		t.Run(kind, func(t *testing.T) {
			h := goodHistory()
			spoil(h)
			res := chaos.Check(h)
			if got := kinds(res); !reflect.DeepEqual(got, []string{kind}) {
				t.Fatalf("kinds %v, want [%s]; %+v", got, kind, res.Violations)
			}
			if res.First == nil || res.Worst == nil {
				t.Fatal("no first or worst violation")
			}
			if res.First.Intent >= 0 && len(chaos.Timeline(h, res.First.Intent)) < 2 {
				t.Error("no timeline for the intent involved")
			}
		})
	}
}

// A saved history is checked again offline with the same verdict.
func TestHistoryRoundTrip(t *testing.T) {
	t.Parallel()
	h := goodHistory()
	h.StuckKeys = []string{"1/k"}
	path := filepath.Join(t.TempDir(), "history.json")
	if err := h.Save(path); err != nil {
		t.Fatal(err)
	}
	back, err := chaos.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := chaos.Check(h), chaos.Check(back); !reflect.DeepEqual(a.Violations, b.Violations) {
		t.Errorf("before %+v\nafter %+v", a.Violations, b.Violations)
	}
}

// synthetic makes a valid history of n intents on 10 accounts, with 200
// audits, shaped like a real run's.
func synthetic(n int) *chaos.History {
	const accounts = 10
	h := &chaos.History{Duration: 1}
	bal := make([]int64, accounts)
	for i := range bal {
		bal[i] = 1_000_000
		h.Opening = append(h.Opening, bank.Account{ID: int64(i + 1), OwnerID: int64(i + 1), Status: "active", BalanceKobo: bal[i]})
	}
	var id int64
	for i := range n {
		from, to := int64(i%accounts+1), int64((i+3)%accounts+1)
		amount := int64(100 + i%900)
		in := chaos.Intent{Index: i, Label: fmt.Sprintf("intent-%d", i), UserID: from, Key: fmt.Sprintf("k-%020d", i),
			Request: bank.TransferRequest{From: from, To: to, AmountKobo: amount}, Outcome: chaos.SeenOK}
		in.Attempts = append(in.Attempts, chaos.Attempt{N: 1, Phase: chaos.PhaseFault, Fault: "lose-response", Seen: chaos.SeenUnknown, Error: "timed out"})
		id++
		bal[from-1] -= amount
		bal[to-1] += amount
		body := receipt(id, from, to, amount, bal[from-1])
		in.Attempts = append(in.Attempts,
			chaos.Attempt{N: 2, Phase: chaos.PhaseFault, Status: 201, Replayed: true, Body: body, Seen: chaos.SeenOK},
			chaos.Attempt{N: 3, Phase: chaos.PhaseFault, Status: 201, Replayed: true, Body: body, Seen: chaos.SeenOK})
		h.Intents = append(h.Intents, in)
		h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: id, From: from, To: to, AmountKobo: amount, Intent: in.Label})
		if i%(n/200+1) == 0 {
			h.Audits = append(h.Audits, chaos.Snapshot{AtNs: int64(i), Balances: append([]int64(nil), bal...)})
		}
	}
	for i, b := range bal {
		h.Final.Accounts = append(h.Final.Accounts, bank.Account{ID: int64(i + 1), OwnerID: int64(i + 1), Status: "active", BalanceKobo: b})
	}
	return h
}

func TestSyntheticHistoryIsValid(t *testing.T) {
	t.Parallel()
	if res := chaos.Check(synthetic(1000)); !res.Valid() {
		t.Fatalf("%+v", res.Violations[:1])
	}
}

// BenchmarkCheck checks a 10,000-intent history (30,000 attempts, 200
// audits); the checker is linear, so 100,000 intents take ten times as long.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		h := synthetic(n)
		b.Run(fmt.Sprintf("intents=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !chaos.Check(h).Valid() {
					b.Fatal("invalid")
				}
			}
		})
	}
}
