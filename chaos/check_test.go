package chaos_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

func receipt(id, from, to, amount, balance int64) chaos.Bytes {
	b, _ := json.Marshal(bank.Receipt{TransferID: id, From: from, To: to, AmountKobo: amount, BalanceKobo: balance})
	return b
}

func refusal(status int, code string) chaos.Bytes {
	return chaos.Bytes(bank.Reject(status, code, "refused").Body)
}

func key(n int) string { return fmt.Sprintf("chaos-key-%010d", n) }

// The good history's bank: no account id equals its owner's user id, users
// 1 and 2 own several accounts, a frozen and a closed account, and a solo
// account that only intent-4 touches. ₦300 in all.
var opening = []bank.Account{
	{ID: 2, OwnerID: 1, Holder: "Frozen", Status: "frozen", BalanceKobo: 4_000},
	{ID: 17, OwnerID: 2, Holder: "Closed", Status: "closed", BalanceKobo: 3_000},
	{ID: 103, OwnerID: 1, Holder: "A", Status: "active", BalanceKobo: 10_000},
	{ID: 113, OwnerID: 1, Holder: "B", Status: "active", BalanceKobo: 5_000},
	{ID: 123, OwnerID: 2, Holder: "C", Status: "active", BalanceKobo: 5_000},
	{ID: 907, OwnerID: 2, Holder: "Solo", Status: "active", BalanceKobo: 3_000},
}

// goodHistory is a small valid history that takes most of the checker's
// paths: a transfer whose answer was lost and then replayed, and replayed
// again when its user tapped again; a refusal for want of money; a key
// reused for another amount (422, twice); another user's account (404); the
// whole balance of a solo account (201, ₦0 left); a frozen sender (422);
// another user sending their own transfer under intent-0's key text; a
// closed sender with money in its account (422); and payments to a frozen,
// a closed and a missing account, and to the same account (422 each).
func goodHistory() *chaos.History {
	ok := func(n int, body chaos.Bytes, replayed bool, phase string) chaos.Attempt {
		return chaos.Attempt{N: n, Phase: phase, StartNs: int64(10 * n), EndNs: int64(10*n + 5), Status: 201, Replayed: replayed, Body: body, Seen: chaos.SeenOK}
	}
	no := func(n, status int, code string, replayed bool) chaos.Attempt {
		return chaos.Attempt{N: n, Phase: chaos.PhaseFault, StartNs: int64(10 * n), EndNs: int64(10*n + 5), Status: status, Replayed: replayed, Body: refusal(status, code), Seen: chaos.SeenRejected}
	}
	intent := func(i int, user int64, k string, from, to, amount int64, outcome string, attempts ...chaos.Attempt) chaos.Intent {
		for a := range attempts {
			attempts[a].Key = k
		}
		return chaos.Intent{Index: i, Label: fmt.Sprintf("intent-%d", i), UserID: user, Key: k, Outcome: outcome,
			Request: bank.TransferRequest{From: from, To: to, AmountKobo: amount}, Attempts: attempts}
	}
	r0 := receipt(1, 103, 123, 1_000, 9_000)
	reuse := intent(2, 1, key(0), 103, 123, 2_000, chaos.SeenRejected,
		no(1, 422, idem.CodeKeyReused, false), no(2, 422, idem.CodeKeyReused, false))
	reuse.Reuse, reuse.ReuseOf = chaos.ReuseAmount, 0
	h := &chaos.History{
		Seed:    1,
		Config:  chaos.Config{Faults: chaos.Rates{chaos.FaultLoseResponse: 0.1}},
		Opening: opening,
		Intents: []chaos.Intent{
			intent(0, 1, key(0), 103, 123, 1_000, chaos.SeenOK,
				chaos.Attempt{N: 1, Phase: chaos.PhaseFault, Fault: chaos.FaultLoseResponse, StartNs: 10, EndNs: 20, Error: "timed out", Seen: chaos.SeenUnknown},
				ok(2, r0, true, chaos.PhaseFault),
				ok(3, r0, true, chaos.PhaseRepeat)),
			intent(1, 2, key(1), 123, 103, 8_000, chaos.SeenRejected, no(1, 422, bank.CodeInsufficientFunds, false)),
			reuse,
			intent(3, 2, key(3), 103, 113, 100, chaos.SeenRejected, no(1, 404, bank.CodeAccountNotFound, false)),
			intent(4, 2, key(4), 907, 113, 3_000, chaos.SeenOK, ok(1, receipt(2, 907, 113, 3_000, 0), false, chaos.PhaseFault)),
			intent(5, 1, key(5), 2, 103, 100, chaos.SeenRejected, no(1, 422, bank.CodeAccountNotActive, false)),
			intent(6, 2, key(0), 123, 113, 500, chaos.SeenOK, ok(1, receipt(3, 123, 113, 500, 5_500), false, chaos.PhaseFault)),
			intent(7, 2, key(7), 17, 103, 100, chaos.SeenRejected, no(1, 422, bank.CodeAccountNotActive, false)),
			intent(8, 1, key(8), 113, 2, 100, chaos.SeenRejected, no(1, 422, bank.CodeRecipientUnavailable, false)),
			intent(9, 1, key(9), 113, 17, 100, chaos.SeenRejected, no(1, 422, bank.CodeRecipientUnavailable, false)),
			intent(10, 1, key(10), 113, chaos.MissingID, 100, chaos.SeenRejected, no(1, 422, bank.CodeRecipientUnavailable, false)),
			intent(11, 1, key(11), 113, 113, 100, chaos.SeenRejected, no(1, 422, bank.CodeSameAccount, false)),
		},
		Audits: []chaos.Snapshot{
			{AtNs: 5, Balances: []int64{4_000, 3_000, 10_000, 5_000, 5_000, 3_000}},
			{AtNs: 95, Balances: []int64{4_000, 3_000, 9_000, 8_500, 5_500, 0}},
		},
		Final: bank.Ledger{
			Accounts: withBalances(4_000, 3_000, 9_000, 8_500, 5_500, 0),
			Transfers: []bank.TransferRow{
				{ID: 1, From: 103, To: 123, AmountKobo: 1_000, Intent: "intent-0"},
				{ID: 2, From: 907, To: 113, AmountKobo: 3_000, Intent: "intent-4"},
				{ID: 3, From: 123, To: 113, AmountKobo: 500, Intent: "intent-6"},
			},
		},
		CompletedKeys: []string{"1/" + key(0), "2/" + key(1), "2/" + key(3), "2/" + key(4), "1/" + key(5), "2/" + key(0), "2/" + key(7),
			"1/" + key(8), "1/" + key(9), "1/" + key(10), "1/" + key(11)},
		// Before healing one key was in progress: a server stopped after its
		// claim held it, alive.
		BeforeHeal: &chaos.KeyCensus{InProgress: []chaos.HeldKey{{Key: "1/" + key(0), LockID: "lock-sleeper"}}, LiveLocks: []string{"lock-sleeper"}},
		Fired:      map[string]int{chaos.FaultLoseResponse: 1},
		Server:     map[string]int{},
		Duration:   100,
		// Each transfer texted once, its event published (transfer 2's
		// twice: delivery is at least once) and applied once.
		SideEffects: &outbox.Snapshot{SMSChecked: true, LogChecked: true, Consumer: "notifier", Leases: true, LockChecked: true,
			Transfers: []int64{1, 2, 3},
			SMS:       []outbox.SMS{{ID: 1, Message: outbox.Message{TransferID: 1}}, {ID: 2, Message: outbox.Message{TransferID: 2}}, {ID: 3, Message: outbox.Message{TransferID: 3}}},
			Events: []outbox.Record{{ID: "evt-2", TransferID: 1}, {ID: "evt-4", TransferID: 2}, {ID: "evt-4", TransferID: 2, Offset: 1},
				{ID: "evt-6", TransferID: 3}},
			Applied: map[string]int{"evt-2": 1, "evt-4": 1, "evt-6": 1},
			Grants:  4,
		},
	}
	return h
}

// frozenWhileRefused records a freeze of account 123 (under intent-0,
// which did not debit it) from at to thaw, and has intent-1, from 123 in
// [10, 15], refused for it: 422 account_not_active.
func frozenWhileRefused(h *chaos.History, at, thaw int64) {
	h.Freezes = []chaos.Freeze{{Intent: "intent-0", Account: 123, AtNs: at, ThawNs: thaw}}
	h.Intents[1].Attempts[0].Body = refusal(422, bank.CodeAccountNotActive)
}

// withBalances is the opening accounts with these balances, in id order.
func withBalances(b ...int64) []bank.Account {
	out := append([]bank.Account(nil), opening...)
	for i := range out {
		out[i].BalanceKobo = b[i]
	}
	return out
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
	if s := res.Stats; s.OK != 3 || s.Rejected != 9 || s.Replays != 2 || s.Transfers != 3 {
		t.Errorf("stats %+v", s)
	}
	// A good history that did not exercise everything is not VALID.
	if v := res.Verdict(); v != chaos.Inconclusive {
		t.Errorf("verdict %s, want %s: this small history takes few of the defence paths", v, chaos.Inconclusive)
	}
}

// Each bad history breaks exactly one rule, and the checker names that rule
// and no other; the same history unbroken passes (TestCheckerAcceptsAGoodHistory).
// Each case says the one-line mistake in the checker it exists to catch.
func TestCheckerFlagsEachViolationKind(t *testing.T) {
	t.Parallel()
	cases := map[string]func(h *chaos.History){
		// A checker that adds up only the final ledger.
		chaos.KindTotal: func(h *chaos.History) { h.Audits[1].Balances[3] = 9_500 },
		// A checker that looks only at the final balances.
		chaos.KindNegative: func(h *chaos.History) {
			h.Audits[1].Balances[2], h.Audits[1].Balances[3] = -1_000, 18_500
		},
		// A checker that counts transfers per key instead of per intent.
		chaos.KindTwice: func(h *chaos.History) {
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 4, From: 103, To: 123, AmountKobo: 1_000, Intent: "intent-0"})
			h.Final.Accounts = withBalances(4_000, 3_000, 8_000, 8_500, 6_500, 0)
		},
		// A checker that trusts a 201 without looking the transfer up.
		chaos.KindAckMissing: func(h *chaos.History) { h.Final.Transfers[0].Intent = "intent-99" },
		// A checker that looks only at acknowledged intents: intent-1 was
		// told 422 insufficient_funds, yet ₦50 moved for it.
		chaos.KindRejected: func(h *chaos.History) {
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 4, From: 123, To: 103, AmountKobo: 5_000, Intent: "intent-1"})
			h.Final.Accounts = withBalances(4_000, 3_000, 14_000, 8_500, 500, 0)
		},
		// A checker that accepts any refusal as the truth.
		chaos.KindWrong: func(h *chaos.History) {
			// The frozen sender told it lacked the money.
			h.Intents[5].Attempts[0].Body = refusal(422, bank.CodeInsufficientFunds)
		},
		// A checker that trusts the accounts' opening statuses: 103 was
		// frozen under intent-0 after its checks, and debited anyway.
		chaos.KindFrozen: func(h *chaos.History) {
			h.Freezes = []chaos.Freeze{{Intent: "intent-0", Account: 103, AtNs: 12}}
		},
		// A checker that compares replays as JSON values, not bytes.
		chaos.KindReplay: func(h *chaos.History) {
			h.Intents[0].Attempts[2].Body = chaos.Bytes(`{"to":123,"from":103,"amountKobo":1000,"transferId":1,"balanceKobo":9000}`)
		},
		// A checker that looks at keys only after healing, when the clock
		// has moved past every lock and a retry took the key over.
		chaos.KindAbandoned: func(h *chaos.History) {
			h.BeforeHeal.InProgress = append(h.BeforeHeal.InProgress, chaos.HeldKey{Key: "2/" + key(1), LockID: "lock-gone"})
		},
		chaos.KindUnresolved: func(h *chaos.History) {
			h.Intents[1].Outcome = chaos.SeenUnknown
			h.Intents[1].Attempts[0] = chaos.Attempt{N: 1, Phase: chaos.PhaseHeal, Key: key(1), Status: 500, Seen: chaos.SeenUnknown}
		},
		// A checker that checks only the total.
		chaos.KindLedger: func(h *chaos.History) {
			h.Final.Accounts = withBalances(4_000, 3_000, 8_000, 9_500, 5_500, 0)
		},
		// A checker that checks keys only across a crash of PostgreSQL.
		chaos.KindKeyLost: func(h *chaos.History) { h.CompletedKeys = h.CompletedKeys[:3] },
		// A checker that counts SMS per message instead of per transfer.
		chaos.KindSMSNotOnce: func(h *chaos.History) {
			h.SideEffects.SMS = append(h.SideEffects.SMS, outbox.SMS{ID: 4, Message: outbox.Message{TransferID: 3}})
		},
		// A checker that counts SMS per committed transfer only.
		chaos.KindGhostEffect: func(h *chaos.History) {
			h.SideEffects.Events = append(h.SideEffects.Events, outbox.Record{ID: "evt-9", TransferID: 4})
			h.SideEffects.Applied["evt-9"] = 1
		},
		// A checker that looks only at what was sent, not at what is left.
		chaos.KindOutboxLeft: func(h *chaos.History) {
			h.SideEffects.Pending = []string{"row 9 (sms for transfer 3, 5 attempts, failed)"}
		},
		// A checker that trusts the SMS count alone.
		chaos.KindClaimOverlap: func(h *chaos.History) {
			h.SideEffects.Overlaps = []string{"row 1: d2.1 claimed it while d1.1 still held it"}
		},
		// A checker that counts effects, not events.
		chaos.KindEventLost: func(h *chaos.History) { delete(h.SideEffects.Applied, "evt-6") },
		// A checker that counts events applied, not how often.
		chaos.KindEffectTwice: func(h *chaos.History) { h.SideEffects.Applied["evt-4"] = 2 },
		// A checker that looks at the money alone.
		chaos.KindLockTwoHolder: func(h *chaos.History) {
			h.SideEffects.DoubleHolders = []string{"idem-lock:1:k granted to b while a still held it"}
		},
	}
	if len(cases) != len(chaos.Kinds()) {
		t.Fatalf("%d cases for %d kinds", len(cases), len(chaos.Kinds()))
	}
	for kind, spoil := range cases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			h := goodHistory()
			spoil(h)
			res := chaos.Check(h)
			if got := kinds(res); !reflect.DeepEqual(got, []string{kind}) {
				t.Fatalf("kinds %v, want [%s]; %+v", got, kind, res.Violations)
			}
			if res.Verdict() != chaos.Invalid || res.First == nil || res.Worst == nil {
				t.Fatalf("verdict %s, first %v, worst %v", res.Verdict(), res.First, res.Worst)
			}
			if res.First.Intent >= 0 && len(chaos.Timeline(h, res.First.Intent)) < 2 {
				t.Error("no timeline for the intent involved")
			}
		})
	}
}

// A key in progress before healing is abandoned unless a live holder (a
// server stopped after its claim) holds it; across a crash of PostgreSQL the
// check is off, since a holder's release may not have reached the database,
// and so it is across a partition of the servers from PostgreSQL and
// across a change of primary.
func TestCheckerFindsAbandonedKeys(t *testing.T) {
	t.Parallel()
	h := goodHistory()
	h.BeforeHeal.LiveLocks = nil
	if got := kinds(chaos.Check(h)); !reflect.DeepEqual(got, []string{chaos.KindAbandoned}) {
		t.Errorf("the sleeper's lock forgotten: kinds %v, want [%s]", got, chaos.KindAbandoned)
	}
	h.Crashes = []chaos.Crash{{AfterIntent: 1}}
	res := chaos.Check(h)
	if !res.Valid() {
		t.Errorf("across a crash: %+v, want no violation", res.Violations)
	}
	for _, c := range res.Checks {
		if c.Kind == chaos.KindAbandoned {
			t.Error("across a crash the abandoned-key check is listed as made")
		}
	}
	// Across a partition too: a server cut off from PostgreSQL cannot
	// release its key; the lock's expiry frees it.
	h.Crashes = nil
	h.Partitions = []chaos.CutRecord{{Intent: 1}}
	res = chaos.Check(h)
	if !res.Valid() {
		t.Errorf("across a partition: %+v, want no violation", res.Violations)
	}
	for _, c := range res.Checks {
		if c.Kind == chaos.KindAbandoned {
			t.Error("across a partition the abandoned-key check is listed as made")
		}
	}
	// And across a change of primary (a failover on a team's cluster):
	// the holder's release went to a primary that was gone.
	h.Partitions = nil
	h.PrimaryChanges = []chaos.PrimaryChange{{Cause: chaos.CauseCommand, From: "h1:5432", To: "h2:5432", LastSeenNs: 1, LostNs: 2, SeenNs: 3}}
	res = chaos.Check(h)
	if res.ByKind[chaos.KindAbandoned] != 0 {
		t.Errorf("across a change of primary: %+v, want no abandoned key", res.Violations)
	}
	for _, c := range res.Checks {
		if c.Kind == chaos.KindAbandoned {
			t.Error("across a change of primary the abandoned-key check is listed as made")
		}
	}
}

// The rules the checker judges answers by, case by case: each answer that
// breaks them is flagged as a wrong answer, and only as that.
func TestCheckerKnowsWhichAnswersAreRight(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		catches string
		spoil   func(h *chaos.History)
		also    string // another rule the same answer breaks, if any
	}{
		{"another user's account answered 422 instead of 404", "404 accepted for any refusal", func(h *chaos.History) {
			h.Intents[3].Attempts[0].Body = refusal(422, bank.CodeInsufficientFunds)
		}, ""},
		{"a reused key answered with the first request's replay", "a reuse allowed a replay", func(h *chaos.History) {
			a := &h.Intents[2].Attempts[0]
			a.Status, a.Replayed, a.Body, a.Seen = 201, true, receipt(1, 103, 123, 1_000, 9_000), chaos.SeenOK
			h.Intents[2].Attempts = h.Intents[2].Attempts[:1]
		}, chaos.KindAckMissing},
		{"another user under the same key text told its key was reused", "users' keys not independent", func(h *chaos.History) {
			a := &h.Intents[6].Attempts[0]
			a.Status, a.Body, a.Seen = 422, refusal(422, idem.CodeKeyReused), chaos.SeenRejected
			h.Intents[6].Outcome = chaos.SeenRejected
			h.Final.Transfers = h.Final.Transfers[:2]
			h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 8_000, 6_000, 0)
			h.Audits[1].Balances = []int64{4_000, 3_000, 9_000, 8_000, 6_000, 0}
		}, ""},
		{"the whole balance of a solo account refused", "balance >= amount written as >", func(h *chaos.History) {
			a := &h.Intents[4].Attempts[0]
			a.Status, a.Body, a.Seen = 422, refusal(422, bank.CodeInsufficientFunds), chaos.SeenRejected
			h.Intents[4].Outcome = chaos.SeenRejected
			h.Final.Transfers = []bank.TransferRow{h.Final.Transfers[0], h.Final.Transfers[2]}
			h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 5_500, 5_500, 3_000)
			h.Audits[1].Balances = []int64{4_000, 3_000, 9_000, 5_500, 5_500, 3_000}
		}, ""},
		{"a solo account's receipt with the wrong balance", "receipt balances not checked", func(h *chaos.History) {
			h.Intents[4].Attempts[0].Body = receipt(2, 907, 113, 3_000, 3_000)
		}, ""},
		{"a frozen sender answered as if the recipient were the problem", "the sender's status not judged", func(h *chaos.History) {
			h.Intents[5].Attempts[0].Body = refusal(422, bank.CodeRecipientUnavailable)
		}, ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := goodHistory()
			tt.spoil(h)
			res := chaos.Check(h)
			want := []string{chaos.KindWrong}
			if tt.also != "" {
				want = append(want, tt.also)
				sort.Strings(want)
			}
			if got := kinds(res); !reflect.DeepEqual(got, want) {
				t.Fatalf("kinds %v, want %v (the mistake this catches: %s); %+v", got, want, tt.catches, res.Violations)
			}
		})
	}
}

// Every later answer to a key must be its first one replayed, byte for
// byte: each way of breaking that is flagged as replay-differs, only.
func TestCheckerDemandsReplaysOfTheFirstAnswer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		catches string
		spoil   func(a *chaos.Attempt)
	}{
		{"the same bytes, but the request ran again", "a second original accepted", func(a *chaos.Attempt) { a.Replayed = false }},
		{"the members in another order", "bodies compared as JSON values", func(a *chaos.Attempt) {
			a.Body = chaos.Bytes(`{"from":103,"transferId":1,"to":123,"amountKobo":1000,"balanceKobo":9000}`)
		}},
		{"the same JSON with spaces", "bodies compared after compacting", func(a *chaos.Attempt) {
			a.Body = chaos.Bytes(`{"transferId":1, "from":103, "to":123, "amountKobo":1000, "balanceKobo":9000}`)
		}},
		{"another status with the same body", "statuses not compared", func(a *chaos.Attempt) { a.Status = 200 }},
		{"over HTTP, other bytes on the wire", "the wire bytes not compared", func(a *chaos.Attempt) {
			a.Wire = chaos.Bytes(`{"transferId":1,"from":103,"to":123,"amountKobo":1000,"balanceKobo":9000} `)
		}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := goodHistory()
			tt.spoil(&h.Intents[0].Attempts[2]) // the repeat after the final answer
			res := chaos.Check(h)
			if got := kinds(res); !reflect.DeepEqual(got, []string{chaos.KindReplay}) {
				t.Fatalf("kinds %v, want [%s] (the mistake this catches: %s); %+v", got, chaos.KindReplay, tt.catches, res.Violations)
			}
		})
	}
}

// The coverage of the good history: each path it takes, counted once for
// each time; the faults it was configured with.
func TestCoverageCountsEachPath(t *testing.T) {
	t.Parallel()
	h := goodHistory()
	h.Server = map[string]int{chaos.PathTakeover: 2, chaos.PathTxRetry: 1}
	cov := chaos.Check(h).Coverage
	got := map[string]int{}
	for _, p := range cov.Paths {
		got[p.Path] = p.Count
	}
	want := map[string]int{
		chaos.PathReplay: 1, chaos.PathReplayAfterFinal: 1, chaos.PathReuseAmount: 1, chaos.PathSharedKey: 1,
		chaos.PathExactBalance: 1, chaos.PathInsufficient: 1, chaos.PathNotOwner: 1, chaos.PathFrozenSender: 1, chaos.PathClosedSender: 1,
		chaos.PathFrozenRecipient: 1, chaos.PathClosedRecipient: 1, chaos.PathMissingRecipient: 1, chaos.PathSameAccount: 1,
		chaos.PathTakeover: 2, chaos.PathTxRetry: 1,
	}
	for _, p := range chaos.Paths() {
		if got[p] != want[p] {
			t.Errorf("%s: %d, want %d", p, got[p], want[p])
		}
	}
	if len(cov.Faults) != len(chaos.FaultKinds()) {
		t.Errorf("%d faults in the coverage, want every kind (%d)", len(cov.Faults), len(chaos.FaultKinds()))
	}
	// A rule's answer counts however it reached its client: here the
	// whole-balance transfer's 201 was lost and then replayed.
	h.Intents[4].Attempts = []chaos.Attempt{
		{N: 1, Phase: chaos.PhaseFault, Key: key(4), Fault: chaos.FaultLoseResponse, Error: "timed out", Seen: chaos.SeenUnknown},
		{N: 2, Phase: chaos.PhaseFault, Key: key(4), Status: 201, Replayed: true, Body: receipt(2, 907, 113, 3_000, 0), Seen: chaos.SeenOK},
	}
	for _, p := range chaos.Check(h).Coverage.Paths {
		if p.Path == chaos.PathExactBalance && p.Count != 1 {
			t.Errorf("%s reached through a replay: %d, want 1", p.Path, p.Count)
		}
	}
	missing := strings.Join(cov.Missing(), "\n")
	for _, m := range []string{"conflict-409 never happened", "deadlock-retry"} {
		if strings.Contains(missing, m) != (m == "conflict-409 never happened") {
			t.Errorf("missing list %q: %q wrongly in or out", missing, m)
		}
	}
}

// A run that broke nothing is VALID only if it took every defence path and
// fired every fault it was given a rate for; otherwise INCONCLUSIVE, with
// what it missed.
func TestVerdictIsInconclusiveWhenAPathOrFaultIsMissing(t *testing.T) {
	t.Parallel()
	full := func() chaos.Coverage {
		var c chaos.Coverage
		for _, p := range chaos.Paths() {
			c.Paths = append(c.Paths, chaos.PathCount{Path: p, Count: 1})
		}
		for _, k := range chaos.FaultKinds() {
			c.Faults = append(c.Faults, chaos.FaultCount{Kind: k, Rate: 0.01, Fired: 1})
		}
		return c
	}
	if v := (chaos.Result{Coverage: full()}).Verdict(); v != chaos.Valid {
		t.Fatalf("full coverage: %s, want %s", v, chaos.Valid)
	}
	for i, p := range chaos.Paths() {
		c := full()
		c.Paths[i].Count = 0
		res := chaos.Result{Coverage: c}
		if v := res.Verdict(); v != chaos.Inconclusive || len(c.Missing()) != 1 || !strings.Contains(c.Missing()[0], p) {
			t.Errorf("path %s not taken: verdict %s, missing %q", p, v, c.Missing())
		}
	}
	for i, k := range chaos.FaultKinds() {
		c := full()
		c.Faults[i].Fired = 0
		if v := (chaos.Result{Coverage: c}).Verdict(); v != chaos.Inconclusive || !strings.Contains(strings.Join(c.Missing(), ""), k) {
			t.Errorf("fault %s never fired: verdict %s, missing %q", k, v, c.Missing())
		}
		c.Faults[i].Rate = 0 // not asked for: nothing missing
		if v := (chaos.Result{Coverage: c}).Verdict(); v != chaos.Valid {
			t.Errorf("fault %s off and not fired: verdict %s, want %s", k, v, chaos.Valid)
		}
	}
	broken := chaos.Result{Coverage: full(), Violations: []chaos.Violation{{Kind: chaos.KindTotal}}}
	if v := broken.Verdict(); v != chaos.Invalid {
		t.Errorf("a violation with full coverage: %s, want %s", v, chaos.Invalid)
	}
}

// A saved history is checked again offline with the same verdict, its bodies
// byte for byte: a replay that differs only in spacing still differs.
func TestHistoryRoundTrip(t *testing.T) {
	t.Parallel()
	for _, spaced := range []bool{false, true} {
		h := goodHistory()
		h.StuckKeys = []string{"1/k"}
		if spaced {
			h.Intents[0].Attempts[2].Body = chaos.Bytes(`{"transferId": 1, "from": 103, "to": 123, "amountKobo": 1000, "balanceKobo": 9000}`)
		}
		path := filepath.Join(t.TempDir(), "history.json")
		if err := h.Save(path); err != nil {
			t.Fatal(err)
		}
		back, err := chaos.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		a, b := chaos.Check(h), chaos.Check(back)
		if !reflect.DeepEqual(a.Violations, b.Violations) || a.Verdict() != b.Verdict() {
			t.Errorf("before %+v\nafter %+v", a.Violations, b.Violations)
		}
		if got := a.ByKind[chaos.KindReplay]; got != map[bool]int{false: 0, true: 1}[spaced] {
			t.Errorf("spaced %v: %d replay violations", spaced, got)
		}
		if got := string(back.Intents[0].Attempts[2].Body); got != string(h.Intents[0].Attempts[2].Body) {
			t.Errorf("body after the round trip %q, before %q", got, h.Intents[0].Attempts[2].Body)
		}
	}
}

// A history saved before bodies were kept as strings (a body as a JSON
// value) still loads, with the value's bytes as its body.
func TestLoadReadsBodiesSavedAsJSONValues(t *testing.T) {
	t.Parallel()
	var a chaos.Attempt
	if err := json.Unmarshal([]byte(`{"n":1,"status":201,"body":{"transferId":1,"from":1},"seen":"ok"}`), &a); err != nil {
		t.Fatal(err)
	}
	if string(a.Body) != `{"transferId":1,"from":1}` {
		t.Errorf("body %q", a.Body)
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
		h.Opening = append(h.Opening, bank.Account{ID: int64(100 + i), OwnerID: int64(i/2 + 1), Status: "active", BalanceKobo: bal[i]})
	}
	var id int64
	for i := range n {
		fi, ti := i%accounts, (i+3)%accounts
		from, to := int64(100+fi), int64(100+ti)
		amount := int64(100 + i%900)
		k := fmt.Sprintf("k-%020d", i)
		in := chaos.Intent{Index: i, Label: fmt.Sprintf("intent-%d", i), UserID: int64(fi/2 + 1), Key: k,
			Request: bank.TransferRequest{From: from, To: to, AmountKobo: amount}, Outcome: chaos.SeenOK}
		in.Attempts = append(in.Attempts, chaos.Attempt{N: 1, Phase: chaos.PhaseFault, Key: k, Fault: "lose-response", Seen: chaos.SeenUnknown, Error: "timed out"})
		id++
		bal[fi] -= amount
		bal[ti] += amount
		body := receipt(id, from, to, amount, bal[fi])
		in.Attempts = append(in.Attempts,
			chaos.Attempt{N: 2, Phase: chaos.PhaseFault, Key: k, Status: 201, Replayed: true, Body: body, Seen: chaos.SeenOK},
			chaos.Attempt{N: 3, Phase: chaos.PhaseFault, Key: k, Status: 201, Replayed: true, Body: body, Seen: chaos.SeenOK})
		h.Intents = append(h.Intents, in)
		h.CompletedKeys = append(h.CompletedKeys, fmt.Sprintf("%d/%s", in.UserID, k))
		h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: id, From: from, To: to, AmountKobo: amount, Intent: in.Label})
		if i%(n/200+1) == 0 {
			h.Audits = append(h.Audits, chaos.Snapshot{AtNs: int64(i), Balances: append([]int64(nil), bal...)})
		}
	}
	for i, b := range bal {
		h.Final.Accounts = append(h.Final.Accounts, bank.Account{ID: int64(100 + i), OwnerID: int64(i/2 + 1), Status: "active", BalanceKobo: b})
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

// The checks listed are the side effects' invariants the history was judged
// on: none for a history that recorded no side effects, and not the lock's
// for a run with no lock in front of its servers (over HTTP).
func TestCheckerListsOnlyTheSideEffectsItJudged(t *testing.T) {
	t.Parallel()
	listed := func(h *chaos.History) map[string]bool {
		out := map[string]bool{}
		for _, c := range chaos.Check(h).Checks {
			out[c.Kind] = true
		}
		return out
	}
	h := goodHistory()
	if l := listed(h); !l[chaos.KindLockTwoHolder] || !l[chaos.KindSMSNotOnce] {
		t.Errorf("a history with side effects and a lock: listed %v", l)
	}
	h.SideEffects.LockChecked = false
	h.SideEffects.DoubleHolders = []string{"ignored: no lock was checked"}
	if l := listed(h); l[chaos.KindLockTwoHolder] || !l[chaos.KindSMSNotOnce] {
		t.Errorf("no lock: listed %v", l)
	}
	if res := chaos.Check(h); !res.Valid() {
		t.Errorf("a lock that was not checked broke the history: %+v", res.Violations)
	}
	h.SideEffects = nil
	if l := listed(h); l[chaos.KindSMSNotOnce] || l[chaos.KindEventLost] {
		t.Errorf("no side effects recorded: listed %v", l)
	}
}

// soloOverdrawn turns intent-4 into a solo intent that asks for ₦0.01 more
// than its account opened with, refused with 422 insufficient_funds: the
// only answer the rules allow, so each spoiling of it is a wrong answer.
func soloOverdrawn(h *chaos.History) {
	in := &h.Intents[4]
	in.Request.AmountKobo = 3_001
	in.Outcome = chaos.SeenRejected
	a := &in.Attempts[0]
	a.Status, a.Body, a.Seen = 422, refusal(422, bank.CodeInsufficientFunds), chaos.SeenRejected
	h.Final.Transfers = []bank.TransferRow{h.Final.Transfers[0], h.Final.Transfers[2]}
	h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 5_500, 5_500, 3_000)
	h.Audits[1].Balances = []int64{4_000, 3_000, 9_000, 5_500, 5_500, 3_000}
}

// refusedThenPaid adds intent-12: user 1 asks for ₦60 from account 113,
// which has ₦50, and is refused; the client then sends it again under
// another key once 113 has received ₦35, and it goes through. Told a
// refusal and a 201, and moved once: no rule is broken.
func refusedThenPaid(h *chaos.History) {
	in := chaos.Intent{Index: 12, Label: "intent-12", UserID: 1, Key: key(12), Outcome: chaos.SeenOK,
		Request: bank.TransferRequest{From: 113, To: 103, AmountKobo: 6_000},
		Attempts: []chaos.Attempt{
			{N: 1, Key: key(12), Phase: chaos.PhaseFault, StartNs: 1, EndNs: 2, Status: 422, Body: refusal(422, bank.CodeInsufficientFunds), Seen: chaos.SeenRejected},
			{N: 2, Key: key(13), Phase: chaos.PhaseFault, StartNs: 96, EndNs: 97, Status: 201, Body: receipt(4, 113, 103, 6_000, 2_500), Seen: chaos.SeenOK},
		}}
	h.Intents = append(h.Intents, in)
	h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 4, From: 113, To: 103, AmountKobo: 6_000, Intent: "intent-12"})
	h.Final.Accounts = withBalances(4_000, 3_000, 15_000, 2_500, 5_500, 0)
	h.CompletedKeys = append(h.CompletedKeys, "1/"+key(12), "1/"+key(13))
	s := h.SideEffects
	s.Transfers = append(s.Transfers, 4)
	s.SMS = append(s.SMS, outbox.SMS{ID: 4, Message: outbox.Message{TransferID: 4}})
	s.Events = append(s.Events, outbox.Record{ID: "evt-8", TransferID: 4})
	s.Applied["evt-8"] = 1
}

// refusalRepeated gives intent-1's refusal a repeat: its user tapped again
// and was answered the stored 422, replayed byte for byte.
func refusalRepeated(h *chaos.History) *chaos.Attempt {
	in := &h.Intents[1]
	in.Attempts = append(in.Attempts, chaos.Attempt{N: 2, Key: key(1), Phase: chaos.PhaseRepeat, StartNs: 60, EndNs: 61,
		Status: 422, Replayed: true, Body: refusal(422, bank.CodeInsufficientFunds), Seen: chaos.SeenRejected})
	return &in.Attempts[1]
}

// Issue 19: every rule of the checker, condition by condition. Each case
// breaks exactly one condition of one rule (want: that rule's kind, and any
// other the same history must break) or is the neighbour that keeps every
// condition although it looks like a break (want: nothing). Each names the
// weakening of the checker (a clause dropped) that it exists to catch; the
// conditions TestCheckerFlagsEachViolationKind, TestCheckerKnowsWhichAnswersAreRight,
// TestCheckerDemandsReplaysOfTheFirstAnswer and TestCheckerFindsAbandonedKeys
// already break alone are not repeated here.
func TestCheckerBreaksEachConditionAlone(t *testing.T) {
	t.Parallel()
	cases := []struct {
		rule, condition, weakening string
		spoil                      func(h *chaos.History)
		want                       []string // nil: the history is valid
	}{
		// total-not-conserved: at every audit (TestCheckerFlagsEachViolationKind) and at the end.
		{chaos.KindTotal, "the final total", "the final ledger's total not compared", func(h *chaos.History) {
			// ₦1 from an account the bank never had: each balance still
			// matches the transfers, only the total grew.
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 4, From: 555, To: 113, AmountKobo: 100})
			h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 8_600, 5_500, 0)
		}, []string{chaos.KindTotal}},
		// negative-balance: at an audit (TestCheckerFlagsEachViolationKind) and at the end.
		{chaos.KindNegative, "no negative balance at the end", "only the audits' balances looked at", func(h *chaos.History) {
			h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: 4, From: 907, To: 113, AmountKobo: 100})
			h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 8_600, 5_500, -100)
		}, []string{chaos.KindNegative}},
		// acknowledged-missing: the transfer told exists, is the intent's
		// (TestCheckerFlagsEachViolationKind), and moved what it asked: from, to, amount.
		{chaos.KindAckMissing, "the transfer told exists", "a 201 whose transfer is not found let through (dropping case !ok alone is no weakening: the intent clause then reads the missing row's intent as none)", func(h *chaos.History) {
			h.Intents[0].Attempts[1].Body = receipt(9, 103, 123, 1_000, 9_000)
			h.Intents[0].Attempts[2].Body = receipt(9, 103, 123, 1_000, 9_000)
		}, []string{chaos.KindAckMissing}},
		{chaos.KindAckMissing, "it moved from the account asked", "row.From != in.Request.From dropped", func(h *chaos.History) {
			h.Final.Transfers[0].From = 113
			h.Final.Accounts = withBalances(4_000, 3_000, 10_000, 7_500, 5_500, 0)
		}, []string{chaos.KindAckMissing}},
		{chaos.KindAckMissing, "it moved to the account asked", "row.To != in.Request.To dropped", func(h *chaos.History) {
			h.Final.Transfers[0].To = 113
			h.Final.Accounts = withBalances(4_000, 3_000, 9_000, 9_500, 4_500, 0)
		}, []string{chaos.KindAckMissing}},
		{chaos.KindAckMissing, "it moved the amount asked", "row.AmountKobo != amount dropped", func(h *chaos.History) {
			h.Final.Transfers[0].AmountKobo = 2_000
			h.Final.Accounts = withBalances(4_000, 3_000, 8_000, 8_500, 6_500, 0)
		}, []string{chaos.KindAckMissing}},
		// rejected-but-moved: told a refusal, never told 201 (neighbour), and money moved.
		{chaos.KindRejected, "never told 201 (neighbour: refused, then paid under another key)", "!sawOK dropped", refusedThenPaid, nil},
		{chaos.KindRejected, "told a refusal (neighbour: no final answer, and it moved)", "sawRejected dropped", func(h *chaos.History) {
			h.Intents[0].Attempts = h.Intents[0].Attempts[:1]
			h.Intents[0].Outcome = chaos.SeenUnknown
		}, []string{chaos.KindUnresolved}},
		// key-lost: every final answer's key, a stored refusal's as well as a
		// 201's, across a failover as across a plain run (issue 30, kind 4).
		{chaos.KindKeyLost, "a stored refusal's key lost across a failover", "keys of 201s only (a.Seen != SeenOK skipped)", func(h *chaos.History) {
			h.Config.Failover = chaos.ReplicationAsync
			h.Crashes = []chaos.Crash{{AfterIntent: 1, AtNs: 30, UpNs: 40}}
			h.CompletedKeys = slices.DeleteFunc(h.CompletedKeys, func(k string) bool { return k == "2/"+key(1) })
		}, []string{chaos.KindKeyLost}},
		// wrong-answer, a refusal the accounts decide: its status and its code.
		{chaos.KindWrong, "a decided refusal's status", "resp.Status == x.status dropped", func(h *chaos.History) {
			a := &h.Intents[3].Attempts[0] // another user's account: only 404 account_not_found
			a.Status, a.Body = 422, refusal(422, bank.CodeAccountNotFound)
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "the same account, refused (neighbour of a 422 insufficient_funds)", "r.From == r.To dropped", func(h *chaos.History) {
			h.Intents[11].Attempts[0].Body = refusal(422, bank.CodeInsufficientFunds)
		}, []string{chaos.KindWrong}},
		// wrong-answer, a key reused for another request: only 422
		// idempotency_key_reused, unless its first request never had a
		// final answer (a server may have released the key after failing it).
		{chaos.KindWrong, "a reuse of a key whose first request settled", "the reuse excused whatever its first request's outcome", func(h *chaos.History) {
			a := &h.Intents[2].Attempts[0]
			a.Body = refusal(422, bank.CodeInsufficientFunds)
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "a reuse of a key whose first request never settled, answered as its own request (neighbour)", "no excuse for an unsettled first request", func(h *chaos.History) {
			h.Intents[0].Attempts = h.Intents[0].Attempts[:1]
			h.Intents[0].Outcome = chaos.SeenUnknown
			for k := range h.Intents[2].Attempts {
				h.Intents[2].Attempts[k].Body = refusal(422, bank.CodeInsufficientFunds)
			}
		}, []string{chaos.KindUnresolved}},
		// wrong-answer, a refusal of an account that a freeze the history
		// records (a transfer that did not hold its sender's row) made
		// inactive while the answer was being made: the truth, then.
		{chaos.KindWrong, "a sender frozen while it was refused (neighbour)", "", func(h *chaos.History) {
			frozenWhileRefused(h, 8, 12)
		}, nil},
		{chaos.KindWrong, "the freeze overlaps the answer", "the freeze's window not compared with the intent's attempts", func(h *chaos.History) {
			frozenWhileRefused(h, 2, 8) // thawed before intent-1's first attempt
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "the freeze is the refused account's", "the refusal's code not matched with the sender or the recipient", func(h *chaos.History) {
			frozenWhileRefused(h, 8, 12)
			h.Intents[1].Attempts[0].Body = refusal(422, bank.CodeRecipientUnavailable) // 103 was not frozen
		}, []string{chaos.KindWrong}},
		// wrong-answer, a solo intent asking for more than it has: only 422 insufficient_funds.
		{chaos.KindWrong, "solo, too much: 422 insufficient_funds (neighbour)", "amount > balance written as >=", soloOverdrawn, nil},
		{chaos.KindWrong, "solo, too much: the status", "resp.Status == 422 dropped", func(h *chaos.History) {
			soloOverdrawn(h)
			a := &h.Intents[4].Attempts[0]
			a.Status, a.Body = 400, refusal(400, bank.CodeInsufficientFunds)
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "solo, too much: the code", "resp.Code() == insufficient_funds dropped", func(h *chaos.History) {
			soloOverdrawn(h)
			h.Intents[4].Attempts[0].Body = refusal(422, bank.CodeAccountNotActive)
		}, []string{chaos.KindWrong}},
		// wrong-answer, a solo intent with the money: only 201, a receipt, the balance left.
		{chaos.KindWrong, "solo, enough: the status", "resp.Status == 201 dropped", func(h *chaos.History) {
			h.Intents[4].Attempts[0].Status = 200
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "solo, enough: a receipt (₦0 left, as a missing receipt reads)", "ok (the receipt decoded) dropped", func(h *chaos.History) {
			h.Intents[4].Attempts[0].Body = chaos.Bytes(`"done"`)
		}, []string{chaos.KindAckMissing, chaos.KindWrong}},
		// wrong-answer, any other intent: 201, or 422 insufficient_funds.
		{chaos.KindWrong, "otherwise a refusal's status", "resp.Status == 422 dropped", func(h *chaos.History) {
			a := &h.Intents[1].Attempts[0]
			a.Status, a.Body = 400, refusal(400, bank.CodeInsufficientFunds)
		}, []string{chaos.KindWrong}},
		{chaos.KindWrong, "otherwise a refusal's code", "resp.Code() == insufficient_funds dropped", func(h *chaos.History) {
			h.Intents[1].Attempts[0].Body = refusal(422, bank.CodeRecipientUnavailable)
		}, []string{chaos.KindWrong}},
		// frozen-debited: the transfer is the frozen intent's, and it debited the frozen account.
		{chaos.KindFrozen, "the account frozen is the one debited (neighbour: the recipient frozen)", "t.From == f.Account dropped", func(h *chaos.History) {
			h.Freezes = []chaos.Freeze{{Intent: "intent-0", Account: 123, AtNs: 12}}
		}, nil},
		{chaos.KindFrozen, "the transfer is the frozen intent's (neighbour: another intent's freeze)", "t.Intent == f.Intent dropped", func(h *chaos.History) {
			h.Freezes = []chaos.Freeze{{Intent: "intent-3", Account: 103, AtNs: 32}}
		}, nil},
		// replay-differs on a refusal: a replay, of the same status, of the same bytes.
		{chaos.KindReplay, "a refusal replayed (neighbour)", "", func(h *chaos.History) { refusalRepeated(h) }, nil},
		{chaos.KindReplay, "a refusal's repeat is a replay", "!a.Replayed dropped, or replays of 201s only", func(h *chaos.History) {
			refusalRepeated(h).Replayed = false
		}, []string{chaos.KindReplay}},
		{chaos.KindReplay, "a refusal's repeat has its bytes", "bytes compared on 201s only", func(h *chaos.History) {
			a := refusalRepeated(h) // the same JSON value, with a space
			a.Body = chaos.Bytes(strings.Replace(string(a.Body), ",", ", ", 1))
		}, []string{chaos.KindReplay}},
		{chaos.KindReplay, "a refusal's repeat has its bytes on the wire", "Wire not compared", func(h *chaos.History) {
			a := refusalRepeated(h)
			a.Wire = append(append(chaos.Bytes(nil), a.Body...), '\n')
		}, []string{chaos.KindReplay}},
		// sms-not-once: not two (TestCheckerFlagsEachViolationKind), not none.
		{chaos.KindSMSNotOnce, "a committed transfer has an SMS", "n != 1 written as n > 1", func(h *chaos.History) {
			h.SideEffects.SMS = h.SideEffects.SMS[:2]
		}, []string{chaos.KindSMSNotOnce}},
		// sms-or-event-for-nothing: an event (TestCheckerFlagsEachViolationKind), an SMS, an outbox row.
		{chaos.KindGhostEffect, "no SMS for nothing", "the SMS not looked at", func(h *chaos.History) {
			h.SideEffects.SMS = append(h.SideEffects.SMS, outbox.SMS{ID: 4, Message: outbox.Message{TransferID: 9}})
		}, []string{chaos.KindGhostEffect}},
		{chaos.KindGhostEffect, "no outbox row for nothing", "the orphans not looked at", func(h *chaos.History) {
			h.SideEffects.Orphans = []string{"outbox row 7 is about transfer 9, which does not exist"}
		}, []string{chaos.KindGhostEffect}},
		// event-lost: every event applied (TestCheckerFlagsEachViolationKind), every transfer published.
		{chaos.KindEventLost, "every committed transfer has its event", "the transfers not looked at", func(h *chaos.History) {
			h.SideEffects.Events = h.SideEffects.Events[:3]
		}, []string{chaos.KindEventLost}},
	}
	for _, tt := range cases {
		t.Run(tt.rule+"/"+tt.condition, func(t *testing.T) {
			t.Parallel()
			h := goodHistory()
			tt.spoil(h)
			res := chaos.Check(h)
			if got := kinds(res); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("kinds %v, want %v (the weakening this catches: %s); %+v", got, tt.want, tt.weakening, res.Violations)
			}
		})
	}
}

// A rule switched off (CheckWithout, the audit's --off) reports nothing and
// is not listed as checked; the others still judge the history.
func TestCheckWithoutSwitchesOffOneRule(t *testing.T) {
	t.Parallel()
	h := goodHistory()
	h.CompletedKeys = h.CompletedKeys[:3]
	if got := kinds(chaos.Check(h)); !reflect.DeepEqual(got, []string{chaos.KindKeyLost}) {
		t.Fatalf("keys lost, every rule on: broken %v, want %s", got, chaos.KindKeyLost)
	}
	res := chaos.CheckWithout(h, []string{chaos.KindKeyLost})
	if !res.Valid() || len(res.ByKind) != 0 {
		t.Errorf("keys lost, %s off: %+v, want no violation", chaos.KindKeyLost, res.Violations)
	}
	for _, c := range res.Checks {
		if c.Kind == chaos.KindKeyLost {
			t.Errorf("%s switched off, yet listed as checked", chaos.KindKeyLost)
		}
	}
	if got := kinds(chaos.CheckWithout(h, []string{chaos.KindTotal})); !reflect.DeepEqual(got, []string{chaos.KindKeyLost}) {
		t.Errorf("keys lost, %s off: broken %v, want %s still", chaos.KindTotal, got, chaos.KindKeyLost)
	}
}

// The audit's rule-by-rule view: a mistake counts for a rule when no
// scenario caught it and its chaos run broke that rule alone; every rule is
// listed, with none when no mistake needs it.
func TestAuditSaysWhatEachRuleAloneCatches(t *testing.T) {
	t.Parallel()
	row := func(bug string, story bool, broken ...string) chaos.AuditRow {
		return chaos.AuditRow{Bug: bug, Caught: map[string]bool{"rules": story, chaos.ChaosColumn: len(broken) > 0}, Broken: broken}
	}
	rep := chaos.AuditReport{Columns: []string{"rules", chaos.ChaosColumn}, Rows: []chaos.AuditRow{
		row("alone", false, chaos.KindKeyLost),
		row("two-rules", false, chaos.KindTotal, chaos.KindLedger),
		row("a-story-too", true, chaos.KindReplay),
		row("a-story-only", true),
	}}
	alone := rep.Alone()
	if len(alone) != len(chaos.Kinds()) {
		t.Errorf("%d rules listed, want every one of %d", len(alone), len(chaos.Kinds()))
	}
	for k, bugs := range alone {
		want := []string(nil)
		if k == chaos.KindKeyLost {
			want = []string{"alone"}
		}
		if !reflect.DeepEqual(bugs, want) {
			t.Errorf("%s alone catches %v, want %v", k, bugs, want)
		}
	}
}
