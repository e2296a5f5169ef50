package scenarios

import (
	"context"
	"errors"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The lesson's first bug: a transfer written as three statements, to an
// account that does not exist. The credit changes no row and succeeds; only
// the third statement fails, after the money has left Ada.
func init() {
	typo := bank.TransferRequest{From: 1, To: 99, AmountKobo: 1_000_000}

	Register(Scenario{
		Name:    "partial-failure",
		Summary: "three statements to missing account 99: without a transaction ₦10,000 vanishes",
		Phases: []Phase{{
			Title:   "without protection: three statements, no transaction",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				r.Step("Ada sends ₦10,000 to account 99, a typo: debit, credit, record, one statement at a time")
				rows, err := bank.NaiveTransfer(bank.WithIntent(ctx, "ada-to-99"), r.DB, typo)
				r.Step("the credit changed %d rows, and did not fail", rows)
				r.Step("failed: %v", pgMessage(err))
				r.Expect(isForeignKeyViolation(err), "the third statement fails on the foreign key")
				r.ExpectBalances(ctx, 4_000_000, 500_000, 2_000_000)
				r.Expect(total(ctx, r) == 6_500_000, "the bank's total drops to ₦65,000")
				return nil
			},
		}, {
			Title: "with protection: the same statements in one transaction",
			Run: func(ctx context.Context, r *Run) error {
				r.Step("the same three statements, inside BEGIN … COMMIT")
				err := pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
					_, err := bank.NaiveTransfer(bank.WithIntent(ctx, "ada-to-99"), tx, typo)
					return err
				})
				r.Step("failed: %v; the transaction rolled back", pgMessage(err))
				r.Expect(isForeignKeyViolation(err), "the third statement fails on the foreign key")
				r.ExpectBalances(ctx, 5_000_000, 500_000, 2_000_000)
				r.ExpectTransfers(ctx, 0)
				return nil
			},
		}},
	})
}

func isForeignKeyViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23503"
}

// pgMessage is the server's own sentence, without pgx's SQLSTATE suffix.
func pgMessage(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Message
	}
	if err == nil {
		return "nothing failed"
	}
	return err.Error()
}

func total(ctx context.Context, r *Run) int64 {
	l, err := bank.ReadLedger(ctx, r.DB)
	if err != nil {
		return -1
	}
	return l.Total()
}
