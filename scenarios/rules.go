package scenarios

import (
	"context"
	"fmt"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// The lesson's seven requests, one per rule, each in its own transaction.
func init() {
	type request struct {
		label  string
		userID int64
		body   string
		status int
		code   string // "" for a transfer
	}
	requests := []request{
		{"ok", 1, `{"from":1,"to":2,"amountKobo":1000000}`, 201, ""},
		{"not your account", 2, `{"from":1,"to":2,"amountKobo":100}`, 404, bank.CodeAccountNotFound},
		{"frozen sender", 3, `{"from":3,"to":1,"amountKobo":100}`, 422, bank.CodeAccountNotActive},
		{"frozen recipient", 1, `{"from":1,"to":3,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"no such recipient", 1, `{"from":1,"to":99,"amountKobo":100}`, 422, bank.CodeRecipientUnavailable},
		{"too much", 2, `{"from":2,"to":1,"amountKobo":9000000}`, 422, bank.CodeInsufficientFunds},
		{"half a kobo", 1, `{"from":1,"to":2,"amountKobo":10.5}`, 400, bank.CodeInvalidAmount},
	}

	Register(Scenario{
		Name:    "rules",
		Title:   "The transfer, done properly",
		Lesson:  "The transfer, done properly",
		Order:   OrderRules,
		Summary: "seven requests, one per rule: one 201, then 404 account_not_found, 422 account_not_active, 422 recipient_unavailable (twice), 422 insufficient_funds, 400 invalid_amount",
		Explain: Explanation{
			Shows: "The lesson's seven requests against the finished transfer, each in its own transaction: " +
				"one that should succeed and six that break one rule each — someone else's account, a frozen " +
				"sender, a frozen recipient, a recipient that does not exist, more than the balance, half a kobo.",
			Breaks: "This story has no unprotected run: it pins the rules themselves. Each refusal must come " +
				"before the first write, with its own status and machine-readable code, and must move nothing.",
			Defence: "Check everything that can be checked before writing: the amount is whole kobo above " +
				"zero, the sender's account exists and belongs to the caller (404 otherwise, so strangers learn " +
				"nothing), both accounts are active (422), and the debit is a conditional UPDATE (422 " +
				"insufficient_funds when it changes no row). Refusals are answers, not crashes.",
			SQL: "SELECT id, owner_id, status, balance_kobo FROM accounts\n" +
				" WHERE id IN ($1, $2) ORDER BY id FOR UPDATE;\n" +
				"UPDATE accounts SET balance_kobo = balance_kobo - $3\n" +
				" WHERE id = $1 AND balance_kobo >= $3;  -- no row: 422 insufficient_funds",
		},
		Phases: []Phase{{
			Title: "every rule of the transfer",
			Run: func(ctx context.Context, r *Run) error {
				for i, q := range requests {
					intent := fmt.Sprintf("rule-%d-%s", i+1, q.label)
					id := r.sendDirect(q.userID, "POST "+q.body)
					var resp bank.Response
					read := false
					err := bank.InTx(bank.WithIntent(ctx, intent), r.DB, func(tx pgx.Tx) error {
						req, refusal := bank.ParseTransferRequest([]byte(q.body))
						if refusal != nil {
							resp = *refusal
							return nil
						}
						var err error
						read = true
						resp, err = bank.Transfer(bank.WithIntent(ctx, intent), tx, q.userID, req)
						return err
					})
					if err != nil {
						return err
					}
					if read {
						r.databaseDirect(id, rulesDatabaseText(resp))
					}
					req, _ := bank.ParseTransferRequest([]byte(q.body))
					r.Told(bank.Told{Intent: intent, UserID: q.userID, Request: req, Response: resp})
					r.emit(Event{Kind: KindAttempt, From: "server", To: userName(q.userID), Delivery: id, Text: fmt.Sprintf("%-18s %s", q.label, Describe(resp))})
					want := fmt.Sprintf("%d %s", q.status, q.code)
					if q.code == "" {
						want = fmt.Sprintf("%d transfer", q.status)
					}
					r.Lesson().Expect(resp.Status == q.status && resp.Code() == q.code, "%s: %s", q.label, want)
				}
				r.Lesson().ExpectBalances(ctx, 4_000_000, 1_500_000, 2_000_000)
				r.Lesson().ExpectTransfers(ctx, 1)
				return nil
			},
		}},
	})
}

// rulesDatabaseText is what one of the rules' requests did in the
// database: a refusal is decided on what the transaction read, and writes
// nothing.
func rulesDatabaseText(resp bank.Response) string {
	if rc, ok := resp.Receipt(); ok {
		return fmt.Sprintf("transfer %d, COMMIT", rc.TransferID)
	}
	return "reads the accounts, writes nothing: " + resp.Code()
}
