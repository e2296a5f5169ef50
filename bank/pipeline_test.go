package bank_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// statementAtATime is the transfer the pipelined one must answer exactly as:
// Transfer in a transaction of its own.
func statementAtATime(ctx context.Context, db bank.DB, userID int64, req bank.TransferRequest) (bank.Response, error) {
	var resp bank.Response
	err := bank.InTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		resp, err = bank.Transfer(ctx, tx, userID, req)
		return err
	})
	return resp, err
}

// transferImpls are the two forms of the correct transfer that every
// concurrency test runs.
var transferImpls = []struct {
	name string
	run  transferFunc
}{
	{"statement at a time", statementAtATime},
	{"pipelined, one round trip", bank.PipelinedTransfer},
	{"pipelined, two round trips", bank.TwoTripTransfer},
}

// highIDs moves the transfers' sequence near the top of integer, so that
// transfer ids have ten digits and a body cut or joined at the wrong place
// shows.
func highIDs(t *testing.T, db bank.Querier) {
	t.Helper()
	if _, err := db.Exec(context.Background(), "SELECT setval(pg_get_serial_sequence('transfers', 'id'), 2147480000)"); err != nil {
		t.Fatal(err)
	}
}

// TestPipelinedTransferAnswersAsTransfer sends the same requests, in the
// same order, to three identical banks without the lesson's coincidences:
// one served by Transfer, one by the pipelined transfer in one round trip
// (which falls back to two for every refusal), one by it in two. Every
// answer must be the same bytes, and the banks the same after each: the same
// rules in the same order, the same refusals writing nothing, the same
// receipt (ten-digit transfer ids included). A rule checked in another order, a balance
// reported before the debit, a refusal that writes, all show as a
// difference.
func TestPipelinedTransferAnswersAsTransfer(t *testing.T) {
	t.Parallel()
	slow := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
	highIDs(t, slow)
	fast := []struct {
		name string
		run  transferFunc
		bank *pgxpool.Pool
	}{
		{"one round trip", bank.PipelinedTransfer, pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})},
		{"two round trips", bank.TwoTripTransfer, pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})},
	}
	for _, f := range fast {
		highIDs(t, f.bank)
	}
	const ada, bola, chidi, dayo = 1, 2, 3, 4
	steps := []struct {
		userID int64
		req    bank.TransferRequest
	}{
		{ada, bank.TransferRequest{From: 11, To: 21, AmountKobo: 1_000_000}},
		{bola, bank.TransferRequest{From: 2, To: 21, AmountKobo: 100}},         // Dayo's account: 404
		{ada, bank.TransferRequest{From: 99, To: 21, AmountKobo: 100}},         // no such account: 404
		{chidi, bank.TransferRequest{From: 31, To: 11, AmountKobo: 100}},       // frozen sender: 422
		{bola, bank.TransferRequest{From: 22, To: 11, AmountKobo: 100}},        // closed sender: 422
		{ada, bank.TransferRequest{From: 12, To: 22, AmountKobo: 100}},         // closed recipient: 422
		{ada, bank.TransferRequest{From: 12, To: 2147483648, AmountKobo: 100}}, // beyond integer: 422
		{ada, bank.TransferRequest{From: 2147483648, To: 21, AmountKobo: 100}}, // beyond integer: 404
		{bola, bank.TransferRequest{From: 21, To: 11, AmountKobo: 1_500_001}},  // a kobo more than Bola has: 422
		{bola, bank.TransferRequest{From: 21, To: 11, AmountKobo: 1_500_000}},  // exactly what Bola has: 201, ₦0 left
		{ada, bank.TransferRequest{From: 11, To: 11, AmountKobo: 100}},         // same account: 422
		{ada, bank.TransferRequest{From: 11, To: 21, AmountKobo: 0}},           // 400
		{ada, bank.TransferRequest{From: 0, To: 21, AmountKobo: 100}},          // 400
		{dayo, bank.TransferRequest{From: 2, To: 12, AmountKobo: 99_999}},      // 201
		{ada, bank.TransferRequest{From: 12, To: 2, AmountKobo: 1_234_567}},    // 201
	}
	for i, s := range steps {
		ctx := bounded(t, fmt.Sprintf("step %d", i))
		want, err := statementAtATime(bank.WithIntent(ctx, fmt.Sprint(i)), slow, s.userID, s.req)
		if err != nil {
			t.Fatalf("step %d, statement at a time: %v", i, err)
		}
		ls := ledger(t, slow)
		for _, f := range fast {
			got, err := f.run(bank.WithIntent(ctx, fmt.Sprint(i)), f.bank, s.userID, s.req)
			if err != nil {
				t.Fatalf("step %d, %s: %v", i, f.name, err)
			}
			if got.Status != want.Status || string(got.Body) != string(want.Body) {
				t.Errorf("step %d: user %d %+v\n %-20s %d %s\n statement at a time  %d %s", i, s.userID, s.req, f.name, got.Status, got.Body, want.Status, want.Body)
			}
			lf := ledger(t, f.bank)
			if ls.Line() != lf.Line() || fmt.Sprint(ls.Transfers) != fmt.Sprint(lf.Transfers) {
				t.Fatalf("step %d: the banks differ\n %-20s %s %v\n statement at a time  %s %v", i, f.name, lf.Line(), lf.Transfers, ls.Line(), ls.Transfers)
			}
		}
	}
	for _, f := range fast {
		if n := len(ledger(t, f.bank).Transfers); n != 4 {
			t.Errorf("%s: %d transfers, want the 4 that were allowed", f.name, n)
		}
	}
}

// TestOutcomeBodySQL evaluates a pipelined transfer's body expression in
// PostgreSQL, in the round trip that inserts the transfer, and compares it
// with the body the transfer returns and with json.Marshal of its receipt,
// byte for byte: the stored answer that a replay sends must be the answer
// the first request got. A refusal's body too. In one round trip the
// expression is queued before the balance is known, and reads it from the
// debited row; a refusal there is the guard's failure, which writes nothing.
func TestOutcomeBodySQL(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 2)
	highIDs(t, pool)
	for _, form := range []struct {
		name  string
		queue bank.QueueTransfer
		// guarded: a refusal is the guard's failure, not an answer.
		guarded bool
	}{
		{"two round trips", bank.TransferPipelined, false},
		{"one round trip", bank.TransferOneTrip, true},
	} {
		for _, tt := range []struct {
			name   string
			userID int64
			req    bank.TransferRequest
			status int
		}{
			{"201 with a ten-digit id", 1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_234_567}, 201},
			{"another 201", 2, bank.TransferRequest{From: 2, To: 1, AmountKobo: 99}, 201},
			{"a refusal", 2, bank.TransferRequest{From: 2, To: 1, AmountKobo: 9_000_000}, 422},
		} {
			t.Run(form.name+"/"+tt.name, func(t *testing.T) {
				ctx := bounded(t, tt.name)
				before := ledger(t, pool)
				var out *bank.Outcome
				var stored string
				err := bank.Pipelined(ctx, pool, func(p *bank.Pipeline) error {
					var err error
					if out, err = form.queue(ctx, p, tt.userID, tt.req); err != nil {
						return err
					}
					expr, args := out.BodySQL(1)
					p.Queue("SELECT "+expr, args...).QueryRow(func(row pgx.Row) error { return row.Scan(&stored) })
					return p.Commit(ctx)
				})
				if form.guarded && tt.status != 201 {
					if !bank.NeedsChecks(err) {
						t.Fatalf("got %v, want the guard's refusal", err)
					}
					if after := ledger(t, pool); after.Line() != before.Line() || len(after.Transfers) != len(before.Transfers) {
						t.Fatalf("the guard's refusal wrote: %s → %s", before.Line(), after.Line())
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				resp := out.Response()
				if resp.Status != tt.status {
					t.Fatalf("got %s, want %d", resp.Summary(), tt.status)
				}
				if stored != string(resp.Body) {
					t.Errorf("the database's body\n %s\nis not the answer's\n %s", stored, resp.Body)
				}
				if rc, ok := resp.Receipt(); ok {
					if rc.TransferID <= 2147480000 {
						t.Errorf("transfer id %d, want one above 2147480000", rc.TransferID)
					}
					if want := balance(t, ledger(t, pool), rc.From); rc.BalanceKobo != want {
						t.Errorf("receipt balance %d, the account holds %d", rc.BalanceKobo, want)
					}
					marshalled, _ := json.Marshal(rc)
					if stored != string(marshalled) {
						t.Errorf("stored %s, json.Marshal %s", stored, marshalled)
					}
				}
			})
		}
	}
}

// TestPipelineFailureSkipsCommit queues a credit, then a debit that the
// accounts' CHECK refuses, then COMMIT, all in one round trip: PostgreSQL
// must skip the COMMIT, and the credit must be rolled back with the rest.
// This is what the unconditional pipelined debit and the fenced completion
// rely on. A pipeline that sent COMMIT apart from the statements before it,
// or a debit that changed no row instead of failing, would keep the credit.
func TestPipelineFailureSkipsCommit(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 2)
	ctx := bounded(t, "a pipelined transaction whose debit fails")
	before := ledger(t, pool).Line()
	err := bank.Pipelined(ctx, pool, func(p *bank.Pipeline) error {
		p.Queue(bank.CreditSQL, int64(100), int64(2))
		p.Queue(bank.PipelinedDebitSQL, int64(5_000_001), int64(1)) // Ada has ₦50,000
		return p.Commit(ctx)
	})
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "23514" {
		t.Fatalf("err = %v, want the CHECK violation (23514)", err)
	}
	if after := ledger(t, pool).Line(); after != before {
		t.Errorf("the failed transaction left a trace:\nbefore %s\nafter  %s", before, after)
	}
	// The connection went back to the pool outside any transaction.
	if _, err := bank.PipelinedTransfer(ctx, pool, 1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}); err != nil {
		t.Errorf("the next transfer on the pool: %v", err)
	}
}

// TestTransferRoundTrips counts the round trips of a transfer that goes
// through and of one that is refused, once each statement is prepared on
// the connection: statement at a time, BEGIN, the locking read, debit,
// credit, INSERT and COMMIT each wait for the one before; pipelined, the
// locking read goes with BEGIN and everything else with COMMIT; in one
// round trip, everything goes together. The rows stay locked for every
// round trip after the first: five, one, none. A refusal in one round trip
// costs four: the guard fails, ROLLBACK, then the two round trips that say
// which rule refused.
func TestTransferRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := bounded(t, "counting round trips")
	conn, counter := pgtest.CountedConn(ctx, t, banks.Template)
	pay := bank.TransferRequest{From: 1, To: 2, AmountKobo: 100}
	tooMuch := bank.TransferRequest{From: 2, To: 1, AmountKobo: 9_000_000}
	for _, tt := range []struct {
		impl          string
		req           bank.TransferRequest
		userID        int64
		status        int
		want          int64
		run           transferFunc
		whyTheseTrips string
	}{
		{"statement at a time", pay, 1, 201, 6, statementAtATime, "BEGIN, lock, debit, credit, INSERT, COMMIT"},
		{"two round trips", pay, 1, 201, 2, bank.TwoTripTransfer, "BEGIN+lock, debit+credit+INSERT+COMMIT"},
		{"one round trip", pay, 1, 201, 1, bank.PipelinedTransfer, "BEGIN+lock+guard+debit+credit+INSERT+COMMIT"},
		{"statement at a time", tooMuch, 2, 422, 4, statementAtATime, "BEGIN, lock, the debit that changes nothing, COMMIT"},
		{"two round trips", tooMuch, 2, 422, 2, bank.TwoTripTransfer, "BEGIN+lock, COMMIT"},
		{"one round trip", tooMuch, 2, 422, 4, bank.PipelinedTransfer, "BEGIN+lock+guard (fails), ROLLBACK, BEGIN+lock, COMMIT"},
	} {
		// Once to prepare the statements on the connection, once to count.
		for range 2 {
			counter.N.Store(0)
			resp, err := tt.run(ctx, conn, tt.userID, tt.req)
			if err != nil || resp.Status != tt.status {
				t.Fatalf("%s: %s %v, want %d", tt.impl, resp.Summary(), err, tt.status)
			}
		}
		if got := counter.N.Load(); got != tt.want {
			t.Errorf("%s, %d: %d round trips, want %d (%s)", tt.impl, tt.status, got, tt.want, tt.whyTheseTrips)
		}
	}
}

// TestGuardRefusesWhatTheChecksRefuse sends transfers in one round trip,
// each breaking one rule alone, to a bank without the lesson's coincidences:
// the guard must refuse every one of them (NeedsChecks) and write nothing.
// Its allowed neighbours, the exact balance among them, must go through in
// that one round trip: a guard stricter than the checks would not move money
// wrongly, but would send every such transfer the slow way.
func TestGuardRefusesWhatTheChecksRefuse(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
	const ada, bola, chidi, dayo = 1, 2, 3, 4
	for _, tt := range []struct {
		name    string
		userID  int64
		req     bank.TransferRequest
		allowed bool
	}{
		{"someone else's account (account 2 is Dayo's, not user 2's)", bola, bank.TransferRequest{From: 2, To: 21, AmountKobo: 100}, false},
		{"the same account, its owner", dayo, bank.TransferRequest{From: 2, To: 12, AmountKobo: 100}, true},
		{"no such sender", ada, bank.TransferRequest{From: 13, To: 21, AmountKobo: 100}, false},
		{"a sender beyond integer", ada, bank.TransferRequest{From: 2147483648, To: 21, AmountKobo: 100}, false},
		{"a frozen sender", chidi, bank.TransferRequest{From: 31, To: 11, AmountKobo: 100}, false},
		{"a closed sender with money", bola, bank.TransferRequest{From: 22, To: 11, AmountKobo: 100}, false},
		{"no such recipient", ada, bank.TransferRequest{From: 11, To: 13, AmountKobo: 100}, false},
		{"a recipient beyond integer", ada, bank.TransferRequest{From: 11, To: 2147483648, AmountKobo: 100}, false},
		{"a frozen recipient", ada, bank.TransferRequest{From: 11, To: 31, AmountKobo: 100}, false},
		{"a closed recipient", ada, bank.TransferRequest{From: 11, To: 22, AmountKobo: 100}, false},
		{"a kobo more than the sender has", bola, bank.TransferRequest{From: 21, To: 11, AmountKobo: 500_001}, false},
		{"exactly what the sender has", bola, bank.TransferRequest{From: 21, To: 11, AmountKobo: 500_000}, true},
		{"the other way, to an account of the same owner", ada, bank.TransferRequest{From: 11, To: 12, AmountKobo: 100}, true},
	} {
		ctx := bounded(t, tt.name)
		before := ledger(t, pool)
		var out *bank.Outcome
		err := bank.Pipelined(ctx, pool, func(p *bank.Pipeline) error {
			var err error
			if out, err = bank.TransferOneTrip(ctx, p, tt.userID, tt.req); err != nil {
				return err
			}
			return p.Commit(ctx)
		})
		after := ledger(t, pool)
		if !tt.allowed {
			if !bank.NeedsChecks(err) {
				t.Errorf("%s: got %v, want the guard's refusal", tt.name, err)
			}
			if after.Line() != before.Line() || len(after.Transfers) != len(before.Transfers) {
				t.Errorf("%s: the refusal wrote: %s → %s", tt.name, before.Line(), after.Line())
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v, want it through in one round trip", tt.name, err)
			continue
		}
		if resp := out.Response(); resp.Status != 201 || len(after.Transfers) != len(before.Transfers)+1 {
			t.Errorf("%s: %s with %d transfers after %d", tt.name, resp.Summary(), len(after.Transfers), len(before.Transfers))
		}
		if got, want := balance(t, after, tt.req.From), balance(t, before, tt.req.From)-tt.req.AmountKobo; got != want {
			t.Errorf("%s: sender holds %d, want %d", tt.name, got, want)
		}
	}
}
