package outbox_test

import (
	"context"
	"slices"
	"testing"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// smsRows lists the outbox's SMS rows as sms:transfer:user:payload.
func smsRows(t *testing.T, q bank.Querier) []string {
	t.Helper()
	rows, err := q.Query(context.Background(),
		"SELECT kind || ':' || transfer_id || ':' || user_id || ':' || payload FROM outbox WHERE kind = 'sms' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A refusal commits, with its key's stored answer. The correct effects
// write nothing for it; written before the transfer's checks, the SMS row
// commits with the refusal, about no transfer (0). A request to an account
// that does not exist has no recipient to name, and no row; a transfer has
// its one SMS row either way.
func TestARefusalWritesNoSMSRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flaws outbox.Flaws
		want  []string
	}{
		{"correct", outbox.Flaws{}, []string{"sms:1:1:You sent ₦1,000 to Bola"}},
		{"sms-before-checks", outbox.Flaws{SMSBeforeChecks: true},
			[]string{"sms:0:1:You sent ₦60,000 to Bola", "sms:1:1:You sent ₦1,000 to Bola"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBank(t, 4)
			h := &idem.Handler{DB: pool, Store: &idem.Store{},
				Effects: &outbox.Effects{DB: pool, SMS: outbox.NewProvider(1), Log: outbox.NewLog(3), Flaws: tc.flaws}}
			for i, want := range []struct {
				req    bank.TransferRequest
				status int
			}{
				{bank.TransferRequest{From: 1, To: 2, AmountKobo: 6_000_000}, 422}, // more than Ada has
				{bank.TransferRequest{From: 1, To: 99, AmountKobo: 100_000}, 422},  // no such account
				{bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000}, 201},
			} {
				req := idem.Request{UserID: 1, Key: "refusal-sms-key-000" + string(rune('1'+i)), Body: want.req.Body()}
				resp, err := h.Handle(context.Background(), req)
				if err != nil || resp.Status != want.status {
					t.Fatalf("request %d: %d %s %v, want %d", i+1, resp.Status, resp.Body, err, want.status)
				}
			}
			if got := smsRows(t, pool); !slices.Equal(got, tc.want) {
				t.Errorf("SMS rows %q, want %q", got, tc.want)
			}
		})
	}
}

// A transfer has one SMS, to its sender, whoever receives it. Addressed
// through the transfer's accounts that the sender owns, a move between two
// accounts of Ada's (1 and her second, 4) gets two SMS rows; a transfer to
// Bola still one.
func TestAMoveBetweenOwnAccountsHasOneSMSRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flaws outbox.Flaws
		want  []string
	}{
		{"correct", outbox.Flaws{}, []string{"sms:1:1:You sent ₦1,000 to Ada", "sms:2:1:You sent ₦2,000 to Bola"}},
		{"sms-per-owned-account", outbox.Flaws{SMSPerOwnedAccount: true},
			[]string{"sms:1:1:You sent ₦1,000 to Ada", "sms:1:1:You sent ₦1,000 to Ada", "sms:2:1:You sent ₦2,000 to Bola"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBank(t, 4)
			if _, err := pool.Exec(context.Background(),
				"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES (4, 1, 'Ada Obi', 'active', 0)"); err != nil {
				t.Fatal(err)
			}
			h := &idem.Handler{DB: pool, Store: &idem.Store{},
				Effects: &outbox.Effects{DB: pool, SMS: outbox.NewProvider(1), Log: outbox.NewLog(3), Flaws: tc.flaws}}
			for i, req := range []bank.TransferRequest{{From: 1, To: 4, AmountKobo: 100_000}, {From: 1, To: 2, AmountKobo: 200_000}} {
				resp, err := h.Handle(context.Background(), idem.Request{UserID: 1, Key: "own-accounts-sms-key-000" + string(rune('1'+i)), Body: req.Body()})
				if err != nil || resp.Status != 201 {
					t.Fatalf("transfer %d: %d %s %v", i+1, resp.Status, resp.Body, err)
				}
			}
			if got := smsRows(t, pool); !slices.Equal(got, tc.want) {
				t.Errorf("SMS rows %q, want %q", got, tc.want)
			}
		})
	}
}
