package scenarios

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// InvFrozen is freeze-race's own invariant.
const InvFrozen = "no money left an account after it was frozen"

// Ada's transfer has checked that her account is active and is about to
// debit it when the bank freezes the account. The row lock taken with the
// checks is what makes the freeze wait for the transfer; without it the
// freeze goes through first and the transfer debits a frozen account. The
// race is staged exactly (a hook stops the transfer between its checks and
// its writes), so it is the same on every run.
func init() {
	story := func(ctx context.Context, r *Run, h *idem.Handler) (freezeWaited bool, first, retry bank.Response, err error) {
		net := r.Network(h, nil)
		tap := r.AdaTap("ada-before-the-freeze")

		checked, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		tctx := bank.WithAfterChecks(ctx, func() {
			// Once: a transaction retried after a deadlock checks again.
			once.Do(func() { close(checked); <-resume })
		})
		r.Step("Ada sends %s; the transfer checks that her account is active, and is about to debit it", bank.Naira(tap.Request.AmountKobo))
		done := make(chan struct{})
		go func() {
			defer close(done)
			first, _ = r.Send(tctx, net, tap, 1, "")
		}()
		select {
		case <-checked:
		case <-done:
			return false, first, retry, errors.New("the transfer finished without reaching its checks")
		}

		r.Step("at that moment the bank freezes Ada's account (a fraud alert)")
		froze := make(chan error, 1)
		go func() {
			_, err := r.DB.Exec(ctx, "UPDATE accounts SET status = 'frozen' WHERE id = 1")
			froze <- err
		}()
		freezeWaited, err = freezeOutcome(ctx, r, froze)
		switch {
		case err != nil:
		case freezeWaited:
			r.Step("the freeze waits: the transfer holds Ada's row lock")
		default:
			r.Step("the freeze commits at once: nothing holds Ada's row")
		}
		r.Step("the transfer carries on")
		close(resume)
		<-done
		if err != nil {
			return false, first, retry, err
		}
		if freezeWaited {
			if err := <-froze; err != nil {
				return false, first, retry, fmt.Errorf("freeze: %w", err)
			}
			r.Step("the freeze commits after the transfer")
		}

		again := Intent{Label: "ada-after-the-freeze", UserID: 1, Key: r.Key(),
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000}}
		r.Step("Ada tries another transfer")
		retry, _ = r.Send(ctx, net, again, 1, "")

		var debitedAfter int
		if err := r.DB.QueryRow(ctx, `
			SELECT count(*) FROM accounts a JOIN transfers t ON t.from_account = a.id AND t.xmin = a.xmin
			WHERE a.status <> 'active'`).Scan(&debitedAfter); err != nil {
			return false, first, retry, err
		}
		// The transaction that wrote an account's current row version is the
		// last that changed it: if that is a transfer from the account, the
		// debit came after the freeze.
		if debitedAfter > 0 {
			r.Invariant(InvFrozen, false, "the debit from Ada's account is its last change, made after it was frozen")
		} else {
			r.Invariant(InvFrozen, true, "every debit from a frozen account came before its freeze")
		}
		return freezeWaited, first, retry, nil
	}

	Register(Scenario{
		Name:    "freeze-race",
		Title:   "A freeze in the middle of a transfer",
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "an account is frozen while a transfer from it is between its checks and its debit: without FOR UPDATE the frozen account is debited",
		Explain: Explanation{
			Shows: "Ada's transfer has checked that her account is active and is about to debit it when " +
				"the bank freezes the account (a fraud alert). bank-sim stops the transfer at exactly that " +
				"point with a hook, so the race is the same on every run.",
			Breaks: "If the transfer reads the accounts without locking them, nothing makes the freeze wait: " +
				"it commits at once, and the transfer, whose check is now stale, debits a frozen account.",
			Defence: "Read both accounts with SELECT … FOR UPDATE, in id order. The checks and the debit then " +
				"happen under a lock the freeze must wait for: the transfer that was checked before the " +
				"freeze completes, the freeze commits after it, and the next transfer is refused 422 " +
				"account_not_active.",
			SQL: "SELECT id, owner_id, status, balance_kobo FROM accounts\n" +
				" WHERE id IN ($1, $2) ORDER BY id FOR UPDATE;\n" +
				"-- a concurrent UPDATE of the account's status now waits for COMMIT",
		},
		Phases: []Phase{{
			Title:   "without protection: the accounts read without FOR UPDATE",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.Bank = bank.Flaws{NoRowLock: true}
				waited, first, _, err := story(ctx, r, h)
				if err != nil {
					return err
				}
				r.Expect(!waited, "the freeze does not wait: no lock protects the checked row")
				r.Expect(first.Status == 201, "the transfer debits the frozen account (201)")
				return nil
			},
		}, {
			Title: "with protection: both account rows locked (FOR UPDATE) when they are checked",
			Run: func(ctx context.Context, r *Run) error {
				waited, first, retry, err := story(ctx, r, r.Handler(nil))
				if err != nil {
					return err
				}
				r.Expect(waited, "the freeze waits for the transfer's row lock")
				r.Expect(first.Status == 201, "the transfer, checked before the freeze, completes (201)")
				r.Expect(retry.Status == 422 && retry.Code() == bank.CodeAccountNotActive, "the next transfer is refused: 422 account_not_active")
				r.ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}

// freezeOutcome waits until the freeze has either committed (false) or is
// waiting for a row lock (true). Both happen within milliseconds; the limit
// only turns a stuck database into an error instead of a hang.
func freezeOutcome(ctx context.Context, r *Run, froze chan error) (bool, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-froze:
			if err != nil {
				return false, fmt.Errorf("freeze: %w", err)
			}
			return false, nil
		default:
		}
		var waiting int
		if err := r.DB.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND query LIKE 'UPDATE accounts SET status%'`).Scan(&waiting); err != nil {
			return false, err
		}
		if waiting > 0 {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, errors.New("the freeze neither committed nor waited for a lock within 10 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
