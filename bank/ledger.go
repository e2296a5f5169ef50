package bank

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TransferRow is one row of the transfers table.
type TransferRow struct {
	ID         int64  `json:"id"`
	From       int64  `json:"from"`
	To         int64  `json:"to"`
	AmountKobo int64  `json:"amountKobo"`
	Intent     string `json:"intent,omitempty"`
}

// Ledger is the bank as one consistent snapshot sees it.
type Ledger struct {
	Accounts  []Account     `json:"accounts"`
	Transfers []TransferRow `json:"transfers"`
}

// ReadLedger reads every account and transfer in one REPEATABLE READ
// transaction, so the total it sees is the total at one instant even while
// transfers are running.
func ReadLedger(ctx context.Context, db DB) (Ledger, error) {
	var l Ledger
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT id, owner_id, holder, status, balance_kobo FROM accounts ORDER BY id")
		if err != nil {
			return err
		}
		l.Accounts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Account, error) {
			var a Account
			err := r.Scan(&a.ID, &a.OwnerID, &a.Holder, &a.Status, &a.BalanceKobo)
			return a, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, "SELECT id, from_account, to_account, amount_kobo, coalesce(intent, '') FROM transfers ORDER BY id")
		if err != nil {
			return err
		}
		l.Transfers, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TransferRow, error) {
			var t TransferRow
			err := r.Scan(&t.ID, &t.From, &t.To, &t.AmountKobo, &t.Intent)
			return t, err
		})
		return err
	})
	if err != nil {
		return Ledger{}, fmt.Errorf("read the ledger: %w", err)
	}
	return l, nil
}

// Total is the money in the bank.
func (l Ledger) Total() int64 {
	var t int64
	for _, a := range l.Accounts {
		t += a.BalanceKobo
	}
	return t
}

// Balance returns the balance of account id, and whether it exists.
func (l Ledger) Balance(id int64) (int64, bool) {
	for _, a := range l.Accounts {
		if a.ID == id {
			return a.BalanceKobo, true
		}
	}
	return 0, false
}

// Line is the lesson's balances line:
// "Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1".
func (l Ledger) Line() string {
	parts := make([]string, len(l.Accounts))
	for i, a := range l.Accounts {
		parts[i] = a.FirstName() + " " + Naira(a.BalanceKobo)
	}
	return fmt.Sprintf("%s | total %s | transfers %d", strings.Join(parts, ", "), Naira(l.Total()), len(l.Transfers))
}
