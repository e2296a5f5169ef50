package scenarios

import (
	"context"
	"errors"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The lesson's first bug: a transfer written as three statements, to an
// account that does not exist. The credit changes no row and succeeds; only
// the third statement fails, after the money has left Ada.
func init() {
	Register(Scenario{
		Name:    "partial-failure",
		Title:   "Partial failure",
		Lesson:  "Partial failure",
		Order:   OrderPartialFailure,
		Amount:  1_000_000,
		Summary: "three statements to missing account 99: without a transaction ₦10,000 vanishes (total ₦65,000); inside one, nothing is lost",
		Explain: Explanation{
			Shows: "A transfer written the obvious way — debit Ada, credit the recipient, record the " +
				"transfer, three statements one after another — with a typo in the recipient: account 99, " +
				"which does not exist.",
			Breaks: "The credit to account 99 changes no row, and SQL does not call that an error. Only the " +
				"third statement fails, on the foreign key, after ₦10,000 has already left Ada's account. " +
				"The money is in no account at all: the bank's total drops from ₦75,000 to ₦65,000.",
			Defence: "Run every statement of one transfer in one transaction. A failure anywhere rolls all " +
				"of them back, so the debit is undone with the rest: all or nothing (the A in ACID).",
			SQL: "BEGIN;\n" +
				"UPDATE accounts SET balance_kobo = balance_kobo - 1000000 WHERE id = 1;\n" +
				"UPDATE accounts SET balance_kobo = balance_kobo + 1000000 WHERE id = 99;\n" +
				"  -- changes 0 rows, and is not an error\n" +
				"INSERT INTO transfers (from_account, to_account, amount_kobo)\n" +
				"VALUES (1, 99, 1000000);  -- fails on the foreign key\n" +
				"ROLLBACK;  -- the debit is undone too",
		},
		Phases: []Phase{{
			Title:   "without protection: three statements, no transaction",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				typo := bank.TransferRequest{From: 1, To: 99, AmountKobo: r.Amount()}
				r.Step("Ada sends %s to account 99, a typo: debit, credit, record, one statement at a time", bank.Naira(typo.AmountKobo))
				id := r.sendDirect(1, fmt.Sprintf("transfer %s to account 99", bank.Naira(typo.AmountKobo)))
				rows, err := bank.NaiveTransfer(bank.WithIntent(ctx, "ada-to-99"), tracedStatements{Querier: r.DB, r: r, id: id}, typo)
				r.answerDirect(id, 1, answerText(err))
				r.Step("the credit changed %d rows, and did not fail", rows)
				r.Step("failed: %v", pgMessage(err))
				r.Lesson().Expect(isForeignKeyViolation(err), "the third statement fails on the foreign key")
				r.Lesson().ExpectBalances(ctx, 5_000_000-typo.AmountKobo, 500_000, 2_000_000)
				r.Lesson().Expect(total(ctx, r) == 7_500_000-typo.AmountKobo, "the bank's total drops to %s", bank.Naira(7_500_000-typo.AmountKobo))
				return nil
			},
		}, {
			Title: "with protection: the same statements in one transaction",
			Run: func(ctx context.Context, r *Run) error {
				typo := bank.TransferRequest{From: 1, To: 99, AmountKobo: r.Amount()}
				r.Step("the same three statements, inside BEGIN … COMMIT")
				id := r.sendDirect(1, fmt.Sprintf("transfer %s to account 99", bank.Naira(typo.AmountKobo)))
				r.databaseDirect(id, "BEGIN")
				err := pgx.BeginFunc(ctx, r.DB, func(tx pgx.Tx) error {
					_, err := bank.NaiveTransfer(bank.WithIntent(ctx, "ada-to-99"), tracedStatements{Querier: tx, r: r, id: id}, typo)
					return err
				})
				if err != nil {
					r.databaseDirect(id, "ROLLBACK")
				}
				r.answerDirect(id, 1, answerText(err))
				r.Step("failed: %v; the transaction rolled back, the debit with it", pgMessage(err))
				r.Lesson().Expect(isForeignKeyViolation(err), "the third statement fails on the foreign key")
				r.Lesson().ExpectBalances(ctx, 5_000_000, 500_000, 2_000_000)
				r.Lesson().ExpectTransfers(ctx, 0)
				return nil
			},
		}},
	})
}

// answerText is what the naive server answers: it has no refusals of its
// own, only the database's error.
func answerText(err error) string {
	if err != nil {
		return "error"
	}
	return "done"
}

func isForeignKeyViolation(err error) bool {
	return bank.SQLState(err) == "23503"
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
