package bank_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestParseTransferRequest(t *testing.T) {
	t.Parallel()
	valid := []struct {
		name string
		body string
		want bank.TransferRequest
	}{
		{"lesson's request", `{"from": 1, "to": 2, "amountKobo": 1000000}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}},
		{"keys in another order", `{"amountKobo":100,"to":2,"from":1}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}},
		{"exponent 1e3 is 1000", `{"from":1,"to":2,"amountKobo":1e3}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1000}},
		{"integral float 100.0 is 100", `{"from":1,"to":2,"amountKobo":100.0}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}},
		{"largest safe integer 2^53-1", `{"from":1,"to":2,"amountKobo":9007199254740991}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1<<53 - 1}},
		{"unknown fields are ignored", `{"from":1,"to":2,"amountKobo":5,"note":"rent"}`, bank.TransferRequest{From: 1, To: 2, AmountKobo: 5}},
	}
	for _, tt := range valid {
		t.Run("accepts/"+tt.name, func(t *testing.T) {
			got, refusal := bank.ParseTransferRequest([]byte(tt.body))
			if refusal != nil {
				t.Fatalf("refused %s: %d %s", tt.body, refusal.Status, refusal.Code())
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}

	refused := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"half a kobo 10.5", `{"from":1,"to":2,"amountKobo":10.5}`, 400, bank.CodeInvalidAmount},
		{"zero amount", `{"from":1,"to":2,"amountKobo":0}`, 400, bank.CodeInvalidAmount},
		{"negative amount", `{"from":1,"to":2,"amountKobo":-1}`, 400, bank.CodeInvalidAmount},
		{"amount as a string", `{"from":1,"to":2,"amountKobo":"100"}`, 400, bank.CodeInvalidAmount},
		{"amount missing", `{"from":1,"to":2}`, 400, bank.CodeInvalidAmount},
		{"amount null", `{"from":1,"to":2,"amountKobo":null}`, 400, bank.CodeInvalidAmount},
		{"amount 2^53 is not safe", `{"from":1,"to":2,"amountKobo":9007199254740992}`, 400, bank.CodeInvalidAmount},
		{"amount 1e300", `{"from":1,"to":2,"amountKobo":1e300}`, 400, bank.CodeInvalidAmount},
		{"from as a string", `{"from":"1","to":2,"amountKobo":100}`, 400, bank.CodeInvalidAccount},
		{"from as a fraction", `{"from":1.5,"to":2,"amountKobo":100}`, 400, bank.CodeInvalidAccount},
		{"from missing", `{"to":2,"amountKobo":100}`, 400, bank.CodeInvalidAccount},
		{"to as a boolean", `{"from":1,"to":true,"amountKobo":100}`, 400, bank.CodeInvalidAccount},
		{"to as an array", `{"from":1,"to":[2],"amountKobo":100}`, 400, bank.CodeInvalidAccount},
		{"account checked before amount", `{"from":"x","to":2,"amountKobo":10.5}`, 400, bank.CodeInvalidAccount},
		{"array instead of object", `[1,2,100]`, 400, bank.CodeInvalidRequest},
		{"string instead of object", `"from 1 to 2"`, 400, bank.CodeInvalidRequest},
		{"JSON null", `null`, 400, bank.CodeInvalidRequest},
		{"not JSON", `from=1&to=2&amountKobo=100`, 400, bank.CodeInvalidRequest},
		{"empty body", ``, 400, bank.CodeInvalidRequest},
		{"truncated object", `{"from":1,"to":2,`, 400, bank.CodeInvalidRequest},
		{"trailing garbage", `{"from":1,"to":2,"amountKobo":100} garbage`, 400, bank.CodeInvalidRequest},
		{"two objects", `{"from":1,"to":2,"amountKobo":100}{"from":1,"to":2,"amountKobo":100}`, 400, bank.CodeInvalidRequest},
		{"stray closing brace", `{"from":1,"to":2,"amountKobo":100}}`, 400, bank.CodeInvalidRequest},
	}
	for _, tt := range refused {
		t.Run("refuses/"+tt.name, func(t *testing.T) {
			got, refusal := bank.ParseTransferRequest([]byte(tt.body))
			if refusal == nil {
				t.Fatalf("accepted %s as %+v, want %d %s", tt.body, got, tt.status, tt.code)
			}
			if refusal.Status != tt.status || refusal.Code() != tt.code {
				t.Errorf("%s: got %d %q, want %d %q", tt.body, refusal.Status, refusal.Code(), tt.status, tt.code)
			}
			if got != (bank.TransferRequest{}) {
				t.Errorf("a refusal came with a request: %+v", got)
			}
		})
	}
}

// transferInTx runs one bank.Transfer in its own transaction, as the lesson's
// rules.js does.
func transferInTx(t testing.TB, db bank.DB, userID int64, req bank.TransferRequest) bank.Response {
	t.Helper()
	ctx := bounded(t, fmt.Sprintf("a transfer %+v by user %d", req, userID))
	var resp bank.Response
	err := bank.InTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		resp, err = bank.Transfer(ctx, tx, userID, req)
		return err
	})
	if err != nil {
		t.Fatalf("transfer %+v by user %d: %v (%v)", req, userID, err, context.Cause(ctx))
	}
	return resp
}

// TestTransferRules runs the lesson's rules.js in order on one bank, plus the
// rules it implies, and checks that each refusal wrote nothing.
func TestTransferRules(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 4)

	t.Run("ok: Ada sends ₦10,000 to Bola", func(t *testing.T) {
		resp := transferInTx(t, pool, 1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000})
		if resp.Status != 201 {
			t.Fatalf("status %d body %s, want 201", resp.Status, resp.Body)
		}
		var body map[string]any
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"transferId": 1.0, "from": 1.0, "to": 2.0, "amountKobo": 1_000_000.0, "balanceKobo": 4_000_000.0}
		if len(body) != len(want) {
			t.Errorf("body %s has fields other than %v", resp.Body, want)
		}
		for k, v := range want {
			if body[k] != v {
				t.Errorf("body[%q] = %v, want %v (body %s)", k, body[k], v, resp.Body)
			}
		}
		l := ledger(t, pool)
		if a, b := balance(t, l, 1), balance(t, l, 2); a != 4_000_000 || b != 1_500_000 {
			t.Errorf("Ada %s, Bola %s; want ₦40,000 and ₦15,000", bank.Naira(a), bank.Naira(b))
		}
		if len(l.Transfers) != 1 || l.Transfers[0] != (bank.TransferRow{ID: 1, From: 1, To: 2, AmountKobo: 1_000_000}) {
			t.Errorf("transfers = %+v, want the one transfer", l.Transfers)
		}
	})

	refusals := []struct {
		name   string
		userID int64
		req    bank.TransferRequest
		status int
		code   string
	}{
		{"not your account", 2, bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}, 404, bank.CodeAccountNotFound},
		{"no such sender account", 1, bank.TransferRequest{From: 99, To: 2, AmountKobo: 100}, 404, bank.CodeAccountNotFound},
		{"frozen sender", 3, bank.TransferRequest{From: 3, To: 1, AmountKobo: 100}, 422, bank.CodeAccountNotActive},
		{"frozen recipient", 1, bank.TransferRequest{From: 1, To: 3, AmountKobo: 100}, 422, bank.CodeRecipientUnavailable},
		{"no such recipient", 1, bank.TransferRequest{From: 1, To: 99, AmountKobo: 100}, 422, bank.CodeRecipientUnavailable},
		{"too much", 2, bank.TransferRequest{From: 2, To: 1, AmountKobo: 9_000_000}, 422, bank.CodeInsufficientFunds},
		{"one kobo more than the balance", 2, bank.TransferRequest{From: 2, To: 1, AmountKobo: 1_500_001}, 422, bank.CodeInsufficientFunds},
		{"same account", 1, bank.TransferRequest{From: 1, To: 1, AmountKobo: 100}, 422, bank.CodeSameAccount},
		{"zero amount", 1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 0}, 400, bank.CodeInvalidAmount},
		{"account number zero", 1, bank.TransferRequest{From: 0, To: 2, AmountKobo: 100}, 400, bank.CodeInvalidAccount},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			before := ledger(t, pool)
			resp := transferInTx(t, pool, tt.userID, tt.req)
			if resp.Status != tt.status || resp.Code() != tt.code {
				t.Errorf("got %d %q (body %s), want %d %q", resp.Status, resp.Code(), resp.Body, tt.status, tt.code)
			}
			after := ledger(t, pool)
			if after.Line() != before.Line() || len(after.Transfers) != len(before.Transfers) {
				t.Errorf("a refusal wrote to the bank:\nbefore %s\nafter  %s", before.Line(), after.Line())
			}
		})
	}

	t.Run("half a kobo is refused before reaching the bank", func(t *testing.T) {
		_, refusal := bank.ParseTransferRequest([]byte(`{"from":1,"to":2,"amountKobo":10.5}`))
		if refusal == nil || refusal.Status != 400 || refusal.Code() != bank.CodeInvalidAmount {
			t.Fatalf("got %+v, want 400 invalid_amount", refusal)
		}
	})

	t.Run("the lesson's final balances", func(t *testing.T) {
		l := ledger(t, pool)
		const want = "Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1"
		if got := l.Line(); got != want {
			t.Errorf("balances line\n got %s\nwant %s", got, want)
		}
		assertAllInvariants(t, l, nil)
	})
}

// TestNaiveTransfer is naive.js and atomic.js: the same three statements to a
// missing recipient, first on a bare pool and then in a transaction.
func TestNaiveTransfer(t *testing.T) {
	t.Parallel()
	req := bank.TransferRequest{From: 1, To: 99, AmountKobo: 1_000_000}

	t.Run("without a transaction ₦10,000 vanishes", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		creditRows, err := bank.NaiveTransfer(context.Background(), pool, req)
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "23503" {
			t.Fatalf("err = %v, want a foreign key violation (23503)", err)
		}
		if creditRows != 0 {
			t.Errorf("the credit to account 99 changed %d rows, want 0", creditRows)
		}
		l := ledger(t, pool)
		if got := l.Total(); got != 6_500_000 {
			t.Errorf("total %s, want ₦65,000", bank.Naira(got))
		}
		if got := balance(t, l, 1); got != 4_000_000 {
			t.Errorf("Ada has %s, want ₦40,000", bank.Naira(got))
		}
		if len(l.Transfers) != 0 {
			t.Errorf("%d transfers recorded, want 0", len(l.Transfers))
		}
		checks := bank.CheckInvariants(bank.LessonAccounts, l, nil)
		if checks[0].Name != bank.InvTotal || checks[0].OK {
			t.Errorf("the total check did not notice the lost money: %+v", checks[0])
		}
	})

	t.Run("inside a transaction nothing is lost", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		err := bank.InTx(context.Background(), pool, func(tx pgx.Tx) error {
			_, err := bank.NaiveTransfer(context.Background(), tx, req)
			return err
		})
		var pg *pgconn.PgError
		if !errors.As(err, &pg) || pg.Code != "23503" {
			t.Fatalf("err = %v, want a foreign key violation (23503)", err)
		}
		l := ledger(t, pool)
		const want = "Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0"
		if got := l.Line(); got != want {
			t.Errorf("got %s\nwant %s", got, want)
		}
		assertAllInvariants(t, l, nil)
	})
}

// TestTransferRulesWithoutCoincidences runs the rules on a bank where no
// account id equals its owner's user id, users own two accounts, and a
// closed account (with money in it) sits beside a frozen one. Each case
// names the one-line mistake it exists to catch: on the lesson's bank,
// where account 1 is user 1's only account and nothing is closed, each of
// those mistakes passes every rule.
func TestTransferRulesWithoutCoincidences(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
	const ada, bola, chidi, dayo = 1, 2, 3, 4

	refusals := []struct {
		name    string
		catches string
		userID  int64
		req     bank.TransferRequest
		status  int
		code    string
	}{
		{"Bola sends from account 2, which is Dayo's", "owner compared with the account id, not owner_id", bola,
			bank.TransferRequest{From: 2, To: 21, AmountKobo: 100}, 404, bank.CodeAccountNotFound},
		{"Bola sends from Ada's current account", "no owner check", bola,
			bank.TransferRequest{From: 11, To: 21, AmountKobo: 100}, 404, bank.CodeAccountNotFound},
		{"Ada sends from Bola's account to her own", "owner compared with the recipient's owner", ada,
			bank.TransferRequest{From: 21, To: 11, AmountKobo: 100}, 404, bank.CodeAccountNotFound},
		{"Bola sends from his closed account, which has ₦3,000", "a sender rule that refuses only frozen", bola,
			bank.TransferRequest{From: 22, To: 21, AmountKobo: 100}, 422, bank.CodeAccountNotActive},
		{"Chidi sends from his frozen account", "a sender rule that refuses only closed", chidi,
			bank.TransferRequest{From: 31, To: 11, AmountKobo: 100}, 422, bank.CodeAccountNotActive},
		{"Ada pays into Bola's closed account", "a recipient rule that refuses only frozen", ada,
			bank.TransferRequest{From: 11, To: 22, AmountKobo: 100}, 422, bank.CodeRecipientUnavailable},
		{"Ada pays into Chidi's frozen account", "a recipient rule that refuses only closed", ada,
			bank.TransferRequest{From: 11, To: 31, AmountKobo: 100}, 422, bank.CodeRecipientUnavailable},
		{"Ada moves savings into savings", "same-account rule missing", ada,
			bank.TransferRequest{From: 12, To: 12, AmountKobo: 100}, 422, bank.CodeSameAccount},
		{"Bola sends one kobo more than his ₦5,000", "balance compared with > instead of >=", bola,
			bank.TransferRequest{From: 21, To: 11, AmountKobo: 500_001}, 422, bank.CodeInsufficientFunds},
		{"Ada moves one kobo more than her savings' ₦20,000 into her current account", "the funds condition skipped between a user's own accounts", ada,
			bank.TransferRequest{From: 12, To: 11, AmountKobo: 2_000_001}, 422, bank.CodeInsufficientFunds},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			before := ledger(t, pool)
			resp := transferInTx(t, pool, tt.userID, tt.req)
			if resp.Status != tt.status || resp.Code() != tt.code {
				t.Errorf("got %d %q (body %s), want %d %q; the mistake this catches: %s", resp.Status, resp.Code(), resp.Body, tt.status, tt.code, tt.catches)
			}
			if after := ledger(t, pool); after.Line() != before.Line() || len(after.Transfers) != len(before.Transfers) {
				t.Errorf("a refusal wrote to the bank:\nbefore %s\nafter  %s", before.Line(), after.Line())
			}
		})
	}

	successes := []struct {
		name    string
		catches string
		userID  int64
		req     bank.TransferRequest
		balance int64 // the sender's balance the receipt must report
	}{
		{"Ada pays Bola from her savings, her second account", "owner looked up for the user's first account only", ada,
			bank.TransferRequest{From: 12, To: 21, AmountKobo: 150_000}, 1_850_000},
		{"Dayo, user 4, sends from account 2", "owner compared with the account id", dayo,
			bank.TransferRequest{From: 2, To: 11, AmountKobo: 40_000}, 60_000},
		{"Bola sends exactly his whole balance, ₦6,500", "balance compared with > instead of >=", bola,
			bank.TransferRequest{From: 21, To: 12, AmountKobo: 650_000}, 0},
	}
	for _, tt := range successes {
		t.Run(tt.name, func(t *testing.T) {
			resp := transferInTx(t, pool, tt.userID, tt.req)
			rc, ok := resp.Receipt()
			if resp.Status != 201 || !ok {
				t.Fatalf("got %s (body %s), want 201; the mistake this catches: %s", resp.Summary(), resp.Body, tt.catches)
			}
			if rc.From != tt.req.From || rc.To != tt.req.To || rc.AmountKobo != tt.req.AmountKobo || rc.BalanceKobo != tt.balance {
				t.Errorf("receipt %+v, want %+v with the sender's balance %s", rc, tt.req, bank.Naira(tt.balance))
			}
			if got := balance(t, ledger(t, pool), tt.req.From); got != tt.balance {
				t.Errorf("account %d has %s, want %s", tt.req.From, bank.Naira(got), bank.Naira(tt.balance))
			}
		})
	}

	l := ledger(t, pool)
	if got := l.Total(); got != pgtest.MixedTotal {
		t.Errorf("total %s, want %s", bank.Naira(got), bank.Naira(pgtest.MixedTotal))
	}
	if len(l.Transfers) != len(successes) {
		t.Errorf("%d transfers, want %d", len(l.Transfers), len(successes))
	}
	for _, c := range bank.CheckInvariants(pgtest.MixedAccounts, l, nil) {
		if !c.OK {
			t.Errorf("invariant %q broken: %s", c.Name, c.Detail)
		}
	}
}

// The no-balance-floor mistake's transfer (OwnFundsReadOnArrival) checks a
// move between one user's accounts on the sender's balance as it was read
// when the request arrived (ReadBalanceOnArrival), and debits without the
// condition: a payment from that account that commits after the read is
// not seen. Ada's savings hold
// ₦20,000 when her request to move ₦15,000 to her current account arrives;
// she pays Bola ₦10,000 from them meanwhile; the move, checked on ₦20,000,
// overdraws. On a bank without the balance's CHECK (the no-balance-floor
// mistake's schema) it commits, leaving ₦-5,000; with the CHECK its debit
// fails (23514). A payment to another user, read just as stale, is still
// refused by the conditional debit.
func TestOwnFundsReadOnArrivalOverdrawsWithoutTheFloor(t *testing.T) {
	t.Parallel()
	flaws := bank.Flaws{OwnFundsReadOnArrival: true}
	for _, floor := range []bool{false, true} {
		t.Run(fmt.Sprintf("CHECK %v", floor), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			ctx := bounded(t, "a move checked on a stale balance")
			if !floor {
				if _, err := pool.Exec(ctx, bank.DropBalanceFloorSQL); err != nil {
					t.Fatal(err)
				}
			}
			run := func(ctx context.Context, userID int64, req bank.TransferRequest) (bank.Response, error) {
				return withFlaws(flaws)(ctx, pool, userID, req)
			}
			move, err := bank.ReadBalanceOnArrival(ctx, pool, 12)
			if err != nil {
				t.Fatal(err)
			}
			payment, err := bank.ReadBalanceOnArrival(ctx, pool, 12)
			if err != nil {
				t.Fatal(err)
			}
			if resp, err := run(ctx, 1, bank.TransferRequest{From: 12, To: 21, AmountKobo: 1_000_000}); err != nil || resp.Status != 201 {
				t.Fatalf("Ada paying Bola ₦10,000 from her savings: %s, %v; want 201", resp.Summary(), err)
			}
			resp, err := run(move, 1, bank.TransferRequest{From: 12, To: 11, AmountKobo: 1_500_000})
			if floor {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
					t.Errorf("the move on a bank with the CHECK: %s, %v; want the CHECK constraint's violation (23514)", resp.Summary(), err)
				}
			} else {
				rc, _ := resp.Receipt()
				if err != nil || resp.Status != 201 || rc.BalanceKobo != -500_000 {
					t.Errorf("the move checked on the ₦20,000 read on arrival: %s, %v; want 201 leaving ₦-5,000", resp.Summary(), err)
				}
				if got := balance(t, ledger(t, pool), 12); got != -500_000 {
					t.Errorf("Ada's savings hold %s after the move, want ₦-5,000", bank.Naira(got))
				}
			}
			// Another user's account: the conditional debit refuses it.
			resp, err = run(payment, 1, bank.TransferRequest{From: 12, To: 21, AmountKobo: 1_500_000})
			if err != nil || resp.Status != 422 || resp.Code() != bank.CodeInsufficientFunds {
				t.Errorf("Ada paying Bola ₦15,000 checked on the same stale read: %s, %v; want 422 %s", resp.Summary(), err, bank.CodeInsufficientFunds)
			}
		})
	}
}

// The own-accounts-unchecked mistake drops the funds condition between one
// user's accounts; the accounts table's CHECK (balance_kobo >= 0) still
// refuses the debit, so the transfer fails with a database error (a 500 to
// its client, on every retry) and writes nothing. That is what the chaos
// run sees of it: an intent that never settles. Between two users the
// condition still holds.
func TestOwnAccountsUncheckedMeetsTheCheckConstraint(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
	flaws := bank.Flaws{OwnAccountsUnchecked: true}
	run := func(userID int64, req bank.TransferRequest) (bank.Response, error) {
		ctx := bounded(t, fmt.Sprintf("a transfer %+v by user %d", req, userID))
		return withFlaws(flaws)(ctx, pool, userID, req)
	}
	before := ledger(t, pool)
	_, err := run(1, bank.TransferRequest{From: 12, To: 11, AmountKobo: 2_000_001})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("Ada overdrawing her savings into her current account with the mistake: %v; want the CHECK constraint's violation (23514)", err)
	}
	if after := ledger(t, pool); after.Line() != before.Line() || len(after.Transfers) != len(before.Transfers) {
		t.Errorf("a failed transfer wrote to the bank:\nbefore %s\nafter  %s", before.Line(), after.Line())
	}
	// Another user's account: the mistake does not reach it.
	resp, err := run(2, bank.TransferRequest{From: 21, To: 11, AmountKobo: 500_001})
	if err != nil || resp.Status != 422 || resp.Code() != bank.CodeInsufficientFunds {
		t.Errorf("Bola overdrawing to Ada with the mistake: %s, %v; want 422 %s", resp.Summary(), err, bank.CodeInsufficientFunds)
	}
	// Within the balance, the mistake moves the money as the correct transfer does.
	resp, err = run(1, bank.TransferRequest{From: 12, To: 11, AmountKobo: 150_000})
	if rc, ok := resp.Receipt(); err != nil || !ok || rc.BalanceKobo != 1_850_000 {
		t.Errorf("Ada moving ₦1,500 of her savings with the mistake: %s, %v; want 201 leaving ₦18,500", resp.Summary(), err)
	}
}

// An administrator freezes the sender while the transfer stands between
// its checks and its debit. The correct transfer holds the sender's row, so
// the freeze waits (and gives up after its lock_timeout). The
// one-lock-per-customer mistake locks the customer's first account only:
// from Ada's first account (11) the freeze still waits, but from her
// savings (12) it commits at once, and the frozen account is debited.
func TestOneLockPerCustomerLeavesTheOtherAccountUnlocked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		flaws      bank.Flaws
		from       int64
		freezeWins bool
	}{
		{"correct transfer, from Ada's savings", bank.Flaws{}, 12, false},
		{"one lock per customer, from Ada's first account", bank.Flaws{OneLockPerCustomer: true}, 11, false},
		{"one lock per customer, from Ada's savings", bank.Flaws{OneLockPerCustomer: true}, 12, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			ctx := bounded(t, "a transfer frozen under")
			var freezeErr error
			hooked := 0
			tctx := bank.WithAfterChecks(ctx, func() {
				hooked++
				freezeErr = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE accounts SET status = 'frozen' WHERE id = $1", tt.from)
					return err
				})
			})
			var resp bank.Response
			err := bank.InTx(tctx, pool, func(tx pgx.Tx) error {
				var err error
				resp, err = bank.TransferWith(tctx, tx, 1, bank.TransferRequest{From: tt.from, To: 21, AmountKobo: 100_000}, tt.flaws)
				return err
			})
			if err != nil || resp.Status != 201 || hooked != 1 {
				t.Fatalf("the transfer: %s, %v (hook ran %d times); want 201, checked before the freeze", resp.Summary(), err, hooked)
			}
			if won := freezeErr == nil; won != tt.freezeWins {
				t.Errorf("the freeze committed under the transfer: %v (%v); want %v", won, freezeErr, tt.freezeWins)
			}
			if !tt.freezeWins && bank.SQLState(freezeErr) != "55P03" {
				t.Errorf("the freeze failed with %v, want lock_not_available (55P03): it waited for the row", freezeErr)
			}
			var status string
			var bal int64
			if err := pool.QueryRow(ctx, "SELECT status, balance_kobo FROM accounts WHERE id = $1", tt.from).Scan(&status, &bal); err != nil {
				t.Fatal(err)
			}
			if frozen := status == "frozen"; frozen != tt.freezeWins {
				t.Errorf("account %d is %s after the debit; frozen under the transfer: want %v", tt.from, status, tt.freezeWins)
			}
			if opening := map[int64]int64{11: 5_000_000, 12: 2_000_000}[tt.from]; bal != opening-100_000 {
				t.Errorf("account %d has %s, want %s: debited once", tt.from, bank.Naira(bal), bank.Naira(opening-100_000))
			}
		})
	}
}

// The credit-by-customer mistake credits the payee's first account (the
// lowest id their owner has) instead of the account named. A payment to
// Ada's current account (11, her first) lands where it should, as every
// payment does in a bank of one account per customer; a payment to her
// savings (12) lands in account 11. The receipt, the transfer's row and
// the total are those of the correct transfer: only the two balances are
// off their ledgers, and the ledger invariant alone breaks.
func TestCreditByCustomerPaysTheCustomersFirstAccount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		flaws          bank.Flaws
		to             int64
		want11, want12 int64 // Ada's two balances after Bola's ₦1,000
	}{
		{"correct transfer, to Ada's savings", bank.Flaws{}, 12, 5_000_000, 2_100_000},
		{"credit by customer, to Ada's first account", bank.Flaws{CreditByCustomer: true}, 11, 5_100_000, 2_000_000},
		{"credit by customer, to Ada's savings", bank.Flaws{CreditByCustomer: true}, 12, 5_100_000, 2_000_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			ctx := bounded(t, "Bola's payment to Ada")
			req := bank.TransferRequest{From: 21, To: tt.to, AmountKobo: 100_000}
			resp, err := withFlaws(tt.flaws)(ctx, pool, 2, req)
			rc, ok := resp.Receipt()
			if err != nil || !ok || rc.From != 21 || rc.To != tt.to || rc.AmountKobo != 100_000 || rc.BalanceKobo != 400_000 {
				t.Fatalf("Bola pays ₦1,000 to account %d: %s, %v; want 201 to %d leaving him ₦4,000", tt.to, resp.Summary(), err, tt.to)
			}
			l := ledger(t, pool)
			if got11, got12 := balance(t, l, 11), balance(t, l, 12); got11 != tt.want11 || got12 != tt.want12 {
				t.Errorf("Ada's accounts 11 and 12 hold %s and %s, want %s and %s", bank.Naira(got11), bank.Naira(got12), bank.Naira(tt.want11), bank.Naira(tt.want12))
			}
			if n := len(l.Transfers); n != 1 || l.Transfers[0].To != tt.to {
				t.Errorf("transfers %+v, want one, to account %d", l.Transfers, tt.to)
			}
			wrongRow := tt.flaws.CreditByCustomer && tt.to != 11
			for _, c := range bank.CheckInvariants(pgtest.MixedAccounts, l, nil) {
				// Only the ledger's, and only when the credit missed the account named.
				if want := !(wrongRow && c.Name == bank.InvLedger); c.OK != want {
					t.Errorf("invariant %q holds: %v (%s); want %v", c.Name, c.OK, c.Detail, want)
				}
			}
		})
	}
}

// The own-credit-in-second-transaction mistake leaves the credit of a move
// between one customer's two accounts out of the transfer's transaction:
// once it commits, Ada's ₦1,000 has left her current account (11) and not
// reached her savings (12), and the bank's total is short by it, until
// CreditOwnAccount's transaction credits it. A payment to another
// customer is credited in the transaction, as by the correct transfer, and
// CreditOwnAccount then credits nothing (the recipient is not the
// sender's).
func TestOwnCreditInSecondTransactionCommitsTheMoveShort(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		flaws    bank.Flaws
		user     int64
		from, to int64
		short    bool // the total between the two commits
	}{
		{"correct transfer, Ada to her savings", bank.Flaws{}, 1, 11, 12, false},
		{"credit in a second transaction, Ada to her savings", bank.Flaws{OwnCreditInSecondTransaction: true}, 1, 11, 12, true},
		{"credit in a second transaction, Bola to Ada", bank.Flaws{OwnCreditInSecondTransaction: true}, 2, 21, 12, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			ctx := bounded(t, "a move of ₦1,000")
			req := bank.TransferRequest{From: tt.from, To: tt.to, AmountKobo: 100_000}
			resp, err := withFlaws(tt.flaws)(ctx, pool, tt.user, req)
			rc, ok := resp.Receipt()
			if err != nil || !ok {
				t.Fatalf("user %d moves ₦1,000 from %d to %d: %s, %v; want 201", tt.user, tt.from, tt.to, resp.Summary(), err)
			}
			want := int64(pgtest.MixedTotal)
			if tt.short {
				want -= req.AmountKobo
			}
			if l := ledger(t, pool); l.Total() != want || len(l.Transfers) != 1 {
				t.Errorf("once the transfer committed: total %s and %d transfers, want %s and 1; %s",
					bank.Naira(l.Total()), len(l.Transfers), bank.Naira(want), l.Line())
			}
			if tt.flaws.OwnCreditInSecondTransaction {
				// What the mistaken handler runs once the transfer committed.
				if err := bank.CreditOwnAccount(ctx, pool, tt.user, rc); err != nil {
					t.Fatal(err)
				}
			}
			l := ledger(t, pool)
			if l.Total() != pgtest.MixedTotal || balance(t, l, tt.to) != opening(t, tt.to)+req.AmountKobo {
				t.Errorf("in the end: total %s, want %s, and account %d credited once; %s",
					bank.Naira(l.Total()), bank.Naira(pgtest.MixedTotal), tt.to, l.Line())
			}
		})
	}
}

// opening is account id's balance in pgtest.MixedAccounts.
func opening(t testing.TB, id int64) int64 {
	t.Helper()
	for _, a := range pgtest.MixedAccounts {
		if a.ID == id {
			return a.BalanceKobo
		}
	}
	t.Fatalf("no account %d in MixedAccounts", id)
	return 0
}
