package bank_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/bank"
)

// accounts returns the lesson's accounts with the given balances for Ada,
// Bola and Chidi.
func accounts(ada, bola, chidi int64) []bank.Account {
	a := slices.Clone(bank.LessonAccounts)
	a[0].BalanceKobo, a[1].BalanceKobo, a[2].BalanceKobo = ada, bola, chidi
	return a
}

func created(id, from, to, amount int64) bank.Response {
	return bank.Created(bank.Receipt{TransferID: id, From: from, To: to, AmountKobo: amount})
}

func TestCheckInvariants(t *testing.T) {
	t.Parallel()
	tenK := bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}
	// The state after the lesson's first transfer, told truthfully.
	cleanLedger := bank.Ledger{
		Accounts:  accounts(4_000_000, 1_500_000, 2_000_000),
		Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 1_000_000, Intent: "tap-1"}},
	}
	cleanTold := []bank.Told{{Intent: "tap-1", UserID: 1, Request: tenK, Response: created(1, 1, 2, 1_000_000)}}

	tests := []struct {
		name   string
		ledger bank.Ledger
		told   []bank.Told
		broken []string // invariants that must fail; all others must pass
		detail string   // a phrase the first broken check's detail must contain
	}{
		{
			name:   "clean ledger passes everything",
			ledger: cleanLedger,
			told:   cleanTold,
		},
		{
			name:   "untouched bank passes everything",
			ledger: bank.Ledger{Accounts: accounts(5_000_000, 500_000, 2_000_000)},
		},
		{
			name:   "money vanished (naive transfer to account 99)",
			ledger: bank.Ledger{Accounts: accounts(4_000_000, 500_000, 2_000_000)},
			broken: []string{bank.InvTotal, bank.InvLedger},
			detail: "₦10,000 vanished",
		},
		{
			// The lesson's naive transfer to account 99, had it been
			// recorded: Ada's balance agrees with the transfers, but the
			// money left the bank.
			name: "money vanished into an account that does not exist",
			ledger: bank.Ledger{
				Accounts:  accounts(4_000_000, 500_000, 2_000_000),
				Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 99, AmountKobo: 1_000_000, Intent: "tap-1"}},
			},
			broken: []string{bank.InvTotal},
			detail: "₦10,000 vanished",
		},
		{
			name:   "money appeared from nowhere",
			ledger: bank.Ledger{Accounts: accounts(5_000_000, 1_500_000, 2_000_000)},
			broken: []string{bank.InvTotal, bank.InvLedger},
			detail: "appeared from nowhere",
		},
		{
			name: "negative balance with the total conserved",
			ledger: bank.Ledger{
				Accounts:  accounts(-500_000, 6_000_000, 2_000_000),
				Transfers: []bank.TransferRow{{ID: 1, From: 1, To: 2, AmountKobo: 5_500_000, Intent: "tap-1"}},
			},
			broken: []string{bank.InvNegative},
			detail: "Ada has ₦-5,000",
		},
		{
			name: "one intent moved money twice",
			ledger: bank.Ledger{
				Accounts: accounts(3_000_000, 2_500_000, 2_000_000),
				Transfers: []bank.TransferRow{
					{ID: 1, From: 1, To: 2, AmountKobo: 1_000_000, Intent: "tap-1"},
					{ID: 2, From: 1, To: 2, AmountKobo: 1_000_000, Intent: "tap-1"},
				},
			},
			broken: []string{bank.InvOnce},
			detail: "tap-1 moved money 2 times (transfers 1, 2)",
		},
		{
			name: "two transfers without intent labels are not duplicates",
			ledger: bank.Ledger{
				Accounts: accounts(3_000_000, 2_500_000, 2_000_000),
				Transfers: []bank.TransferRow{
					{ID: 1, From: 1, To: 2, AmountKobo: 1_000_000},
					{ID: 2, From: 1, To: 2, AmountKobo: 1_000_000},
				},
			},
		},
		{
			name:   "told 201 for a transfer that does not exist",
			ledger: bank.Ledger{Accounts: accounts(5_000_000, 500_000, 2_000_000)},
			told:   []bank.Told{{Intent: "tap-1", UserID: 1, Request: tenK, Response: created(7, 1, 2, 1_000_000)}},
			broken: []string{bank.InvTruth},
			detail: "tap-1 was told transfer 7 succeeded, but it does not exist",
		},
		{
			name:   "told 201 for another intent's transfer",
			ledger: cleanLedger,
			told: []bank.Told{
				cleanTold[0],
				{Intent: "tap-2", UserID: 1, Request: tenK, Response: created(1, 1, 2, 1_000_000)},
			},
			broken: []string{bank.InvTruth},
			detail: "that transfer belongs to tap-1",
		},
		{
			name:   "told 201 for a transfer of a different amount",
			ledger: cleanLedger,
			told: []bank.Told{{Intent: "tap-1", UserID: 1,
				Request:  bank.TransferRequest{From: 1, To: 2, AmountKobo: 5_000_000},
				Response: created(1, 1, 2, 5_000_000)}},
			broken: []string{bank.InvTruth},
			detail: "asked for ₦50,000 from 1 to 2 and was told transfer 1 succeeded, but that transfer moved ₦10,000",
		},
		{
			name:   "told 422 but the intent moved money",
			ledger: cleanLedger,
			told: []bank.Told{{Intent: "tap-1", UserID: 1, Request: tenK,
				Response: bank.Reject(422, bank.CodeInsufficientFunds, "too low")}},
			broken: []string{bank.InvTruth},
			detail: "tap-1 was told 422 insufficient_funds, but it moved money 1 time",
		},
		{
			name:   "a 409 is not a final answer, so it cannot be a lie",
			ledger: cleanLedger,
			told: []bank.Told{
				{Intent: "tap-1", UserID: 1, Request: tenK, Response: bank.Reject(409, "request_in_progress", "busy")},
				{Intent: "tap-1", UserID: 1, Request: tenK}, // no answer arrived
				cleanTold[0],
			},
		},
		{
			name: "balances disagree with the transfers though the total holds",
			ledger: bank.Ledger{
				Accounts:  accounts(4_000_000, 1_500_000, 2_000_000),
				Transfers: nil, // ₦10,000 moved with no transfer recorded
			},
			broken: []string{bank.InvLedger},
			detail: "Ada has ₦40,000, but the transfers say ₦50,000",
		},
	}
	// Each invariant is broken alone by some case, so weakening any one of
	// them fails that case.
	alone := map[string]bool{}
	for _, tt := range tests {
		if len(tt.broken) == 1 {
			alone[tt.broken[0]] = true
		}
	}
	for _, name := range []string{bank.InvTotal, bank.InvNegative, bank.InvOnce, bank.InvTruth, bank.InvLedger} {
		if !alone[name] {
			t.Errorf("no case breaks %q alone", name)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := bank.CheckInvariants(bank.LessonAccounts, tt.ledger, tt.told)
			names := make([]string, len(checks))
			for i, c := range checks {
				names[i] = c.Name
			}
			if want := []string{bank.InvTotal, bank.InvNegative, bank.InvOnce, bank.InvTruth, bank.InvLedger}; !slices.Equal(names, want) {
				t.Fatalf("checks %q, want %q", names, want)
			}
			var firstBroken *bank.Check
			for i, c := range checks {
				wantBroken := slices.Contains(tt.broken, c.Name)
				if c.OK == wantBroken {
					t.Errorf("%q: OK=%v, want %v (detail: %s)", c.Name, c.OK, !wantBroken, c.Detail)
				}
				if !c.OK && firstBroken == nil {
					firstBroken = &checks[i]
				}
				// Counts are spelt for people: "1 time", "2 times", never "time(s)".
				if strings.Contains(c.Detail, "(s)") {
					t.Errorf("%q: %q leaves the plural to the reader", c.Name, c.Detail)
				}
			}
			if got := bank.AllOK(checks); got != (len(tt.broken) == 0) {
				t.Errorf("AllOK = %v with broken %v", got, tt.broken)
			}
			if tt.detail != "" && (firstBroken == nil || !strings.Contains(firstBroken.Detail, tt.detail)) {
				t.Errorf("detail of the first broken check = %+v, want it to contain %q", firstBroken, tt.detail)
			}
		})
	}
}
