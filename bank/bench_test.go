package bank_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/bank"
)

// BenchmarkTransfer is one ₦1 transfer per op, each in its own transaction on
// the real database, alternating Ada→Bola and Bola→Ada so that no balance
// runs out however large b.N is: statement at a time, pipelined in one round
// trip and in two, one client, so that what it measures is round trips.
func BenchmarkTransfer(b *testing.B) {
	for _, impl := range transferImpls {
		b.Run(impl.name, func(b *testing.B) {
			pool := newBank(b, 2)
			ctx := context.Background()
			reqs := [2]struct {
				user int64
				req  bank.TransferRequest
			}{
				{1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}},
				{2, bank.TransferRequest{From: 2, To: 1, AmountKobo: 100}},
			}
			i := 0
			for b.Loop() {
				r := reqs[i%2]
				i++
				resp, err := impl.run(ctx, pool, r.user, r.req)
				if err != nil || resp.Status != 201 {
					b.Fatalf("transfer %d: %v %s", i, err, resp.Summary())
				}
			}
			b.StopTimer()
			if l := ledger(b, pool); l.Total() != openingTotal || len(l.Transfers) != i {
				b.Fatalf("total %s and %d transfers after %d", bank.Naira(l.Total()), len(l.Transfers), i)
			}
		})
	}
}

// BenchmarkCheckInvariants checks a synthetic ledger of 10,000 transfers,
// each its own intent, with a truthful record of what every client was told.
func BenchmarkCheckInvariants(b *testing.B) {
	const n = 10_000
	l := bank.Ledger{Accounts: accounts(5_000_000, 500_000, 2_000_000)}
	told := make([]bank.Told, 0, n)
	for i := range int64(n) {
		from, to := int64(1), int64(2)
		if i%2 == 1 {
			from, to = 2, 1
		}
		amount := 100 + i%7
		intent := fmt.Sprintf("intent-%05d", i)
		l.Transfers = append(l.Transfers, bank.TransferRow{ID: i + 1, From: from, To: to, AmountKobo: amount, Intent: intent})
		l.Accounts[from-1].BalanceKobo -= amount
		l.Accounts[to-1].BalanceKobo += amount
		told = append(told, bank.Told{Intent: intent, UserID: from,
			Request:  bank.TransferRequest{From: from, To: to, AmountKobo: amount},
			Response: created(i+1, from, to, amount)})
	}
	if checks := bank.CheckInvariants(bank.LessonAccounts, l, told); !bank.AllOK(checks) {
		b.Fatalf("the synthetic ledger is not clean: %+v", checks)
	}
	b.ReportAllocs()
	for b.Loop() {
		bank.CheckInvariants(bank.LessonAccounts, l, told)
	}
}
