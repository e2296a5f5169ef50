package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func handle(t *testing.T, h *idem.Handler, userID int64, key string, b []byte) bank.Response {
	t.Helper()
	ctx := bounded(t, fmt.Sprintf("a request of user %d with key %q", userID, key))
	resp, err := h.Handle(ctx, idem.Request{UserID: userID, Key: key, Body: b})
	if err != nil {
		t.Fatalf("Handle(user %d, key %q, %s): %v (%v)", userID, key, b, err, context.Cause(ctx))
	}
	return resp
}

// TestHandlerKeyMisuse is the lesson's key-misuse.js, step by step, on one bank.
func TestHandlerKeyMisuse(t *testing.T) {
	t.Parallel()
	pool := newBank(t, 4)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	const broke = "tap-2026-09-24-0002"
	steps := []struct {
		name     string
		userID   int64
		key      string
		body     string
		status   int
		replayed bool
		code     string // "" for a success
	}{
		{"first request", 1, key, `{"from":1,"to":2,"amountKobo":1000000}`, 201, false, ""},
		{"same, keys reordered", 1, key, `{"amountKobo":1000000,"to":2,"from":1}`, 201, true, ""},
		{"same key, other amount", 1, key, `{"from":1,"to":2,"amountKobo":5000000}`, 422, false, idem.CodeKeyReused},
		{"other user, same key", 2, key, `{"from":2,"to":1,"amountKobo":100000}`, 201, false, ""},
		{"no key", 1, "", `{"from":1,"to":2,"amountKobo":100}`, 400, false, idem.CodeKeyRequired},
		{"malformed key", 1, "short", `{"from":1,"to":2,"amountKobo":100}`, 400, false, idem.CodeKeyRequired},
		{"too much", 2, broke, `{"from":2,"to":1,"amountKobo":9000000}`, 422, false, bank.CodeInsufficientFunds},
		{"too much, retried", 2, broke, `{"from":2,"to":1,"amountKobo":9000000}`, 422, true, bank.CodeInsufficientFunds},
	}
	var first bank.Receipt
	for _, s := range steps {
		resp := handle(t, h, s.userID, s.key, []byte(s.body))
		if resp.Status != s.status || resp.Replayed != s.replayed || resp.Code() != s.code {
			t.Errorf("%s: got %s (code %q), want %d replayed=%v %q", s.name, resp.Summary(), resp.Code(), s.status, s.replayed, s.code)
		}
		if s.name == "first request" {
			first, _ = resp.Receipt()
		}
		if s.name == "same, keys reordered" {
			if rc, _ := resp.Receipt(); rc != first {
				t.Errorf("replayed receipt %+v, want the first one %+v", rc, first)
			}
		}
	}
	l := ledger(t, pool)
	const want = "Ada ₦41,000, Bola ₦14,000, Chidi ₦20,000 | total ₦75,000 | transfers 2"
	if got := l.Line(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if n := keyRows(t, pool); n != 3 {
		t.Errorf("%d key rows, want 3 (Ada's, Bola's, Bola's refused)", n)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()

	t.Run("no key: 400 and nothing written", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		resp := handle(t, h, 1, "", body(1, 2, 1_000_000))
		if resp.Status != 400 || resp.Code() != idem.CodeKeyRequired {
			t.Errorf("got %s, want 400 idempotency_key_required", resp.Summary())
		}
		if n, k := transfers(t, pool), keyRows(t, pool); n != 0 || k != 0 {
			t.Errorf("%d transfers and %d keys written, want none", n, k)
		}
		if got := ledger(t, pool).Line(); got != "Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0" {
			t.Errorf("balances changed: %s", got)
		}
	})

	t.Run("lost response: the retry replays the first 201", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		first := handle(t, h, 1, key, body(1, 2, 1_000_000)) // the response the tunnel ate
		retry := handle(t, h, 1, key, body(1, 2, 1_000_000))
		if first.Status != 201 || first.Replayed || retry.Status != 201 || !retry.Replayed {
			t.Fatalf("first %s, retry %s; want 201 then 201 replayed", first.Summary(), retry.Summary())
		}
		rc, _ := retry.Receipt()
		if want := (bank.Receipt{TransferID: 1, From: 1, To: 2, AmountKobo: 1_000_000, BalanceKobo: 4_000_000}); rc != want {
			t.Errorf("replayed receipt %+v, want %+v", rc, want)
		}
		if n := transfers(t, pool); n != 1 {
			t.Errorf("%d transfers, want 1", n)
		}
	})

	t.Run("business refusal is stored and replayed", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		for i, wantReplayed := range []bool{false, true, true} {
			resp := handle(t, h, 2, key, body(2, 1, 9_000_000))
			if resp.Status != 422 || resp.Code() != bank.CodeInsufficientFunds || resp.Replayed != wantReplayed {
				t.Errorf("call %d: %s, want 422 insufficient_funds replayed=%v", i+1, resp.Summary(), wantReplayed)
			}
		}
		var status string
		var respStatus int
		if err := pool.QueryRow(context.Background(), "SELECT status, response_status FROM idempotency_keys WHERE user_id = 2 AND key = $1", key).Scan(&status, &respStatus); err != nil {
			t.Fatal(err)
		}
		if status != "completed" || respStatus != 422 {
			t.Errorf("key row %s/%d, want completed/422", status, respStatus)
		}
		if n := transfers(t, pool); n != 0 {
			t.Errorf("%d transfers, want 0", n)
		}
	})

	t.Run("invalid body is a stored 400", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		raw := []byte(`{"from":1,"to":2,"amountKobo":10.5}`)
		a, b := handle(t, h, 1, key, raw), handle(t, h, 1, key, raw)
		if a.Status != 400 || a.Code() != bank.CodeInvalidAmount || a.Replayed || !b.Replayed || b.Code() != bank.CodeInvalidAmount {
			t.Errorf("got %s then %s, want 400 invalid_amount then the same replayed", a.Summary(), b.Summary())
		}
	})

	t.Run("unexpected error releases the key and a retry succeeds", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		boom := errors.New("server lost power before COMMIT")
		ctx := idem.WithHooks(context.Background(), idem.Hooks{
			BeforeCommit: func(context.Context) error { return boom },
		})
		resp, err := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)})
		if !errors.Is(err, boom) {
			t.Fatalf("Handle = %s, %v; want the hook's error", resp.Summary(), err)
		}
		if n, k := transfers(t, pool), keyRows(t, pool); n != 0 || k != 0 {
			t.Fatalf("after the failure: %d transfers, %d key rows; want 0 and 0", n, k)
		}
		if got := ledger(t, pool).Total(); got != 7_500_000 {
			t.Fatalf("total %s after a rolled-back transfer", bank.Naira(got))
		}
		retry := handle(t, h, 1, key, body(1, 2, 1_000_000))
		if retry.Status != 201 || retry.Replayed {
			t.Fatalf("retry: %s, want a fresh 201", retry.Summary())
		}
		l := ledger(t, pool)
		if len(l.Transfers) != 1 || l.Accounts[0].BalanceKobo != 4_000_000 {
			t.Errorf("after the retry: %s", l.Line())
		}
	})

	t.Run("AfterClaim sees the claim it is about to use", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}}
		var seen []idem.Claim
		ctx := idem.WithHooks(context.Background(), idem.Hooks{
			AfterClaim: func(_ context.Context, c idem.Claim) { seen = append(seen, c) },
		})
		for range 2 {
			if _, err := h.Handle(ctx, idem.Request{UserID: 1, Key: key, Body: body(1, 2, 100)}); err != nil {
				t.Fatal(err)
			}
		}
		if len(seen) != 1 || seen[0].Action != idem.Proceed || seen[0].LockID == "" {
			t.Errorf("AfterClaim saw %+v, want one proceed claim (a replay claims nothing)", seen)
		}
	})

	t.Run("NoKey handler: every call moves money", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		h := &idem.Handler{DB: pool, Store: &idem.Store{}, NoKey: true}
		for i := range 2 {
			resp := handle(t, h, 1, key, body(1, 2, 1_000_000))
			if resp.Status != 201 || resp.Replayed {
				t.Fatalf("call %d: %s, want 201", i+1, resp.Summary())
			}
		}
		l := ledger(t, pool)
		if len(l.Transfers) != 2 || l.Accounts[0].BalanceKobo != 3_000_000 {
			t.Errorf("%s; want two transfers and Ada at ₦30,000", l.Line())
		}
		if k := keyRows(t, pool); k != 0 {
			t.Errorf("%d key rows written by a handler that ignores keys", k)
		}
	})

	// The lesson's crash.js: server A claims the key and goes silent.
	t.Run("crash: 409 while locked, takeover after expiry, late server fenced", func(t *testing.T) {
		t.Parallel()
		pool := newBank(t, 2)
		s := &idem.Store{}
		h := &idem.Handler{DB: pool, Store: s}
		b := body(1, 2, 1_000_000)
		stuck := begin(t, s, pool, 1, idem.Fingerprint(idem.Method, idem.Path, b), t0)

		setClock(t, pool, at(10))
		if early := handle(t, h, 1, key, b); early.Status != 409 || early.Code() != idem.CodeInProgress {
			t.Fatalf("retry after 10 s: %s, want 409 request_in_progress", early.Summary())
		}
		setClock(t, pool, at(31))
		late := handle(t, h, 1, key, b)
		if rc, ok := late.Receipt(); late.Status != 201 || late.Replayed || !ok || rc.TransferID != 1 {
			t.Fatalf("retry after 31 s: %s, want 201 transfer 1", late.Summary())
		}

		// Server A wakes up and runs its transfer; the fencing check rolls it back.
		err := bank.InTx(context.Background(), pool, func(tx pgx.Tx) error {
			if _, err := bank.Transfer(context.Background(), tx, 1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}); err != nil {
				return err
			}
			return s.Complete(context.Background(), tx, 1, key, stuck.LockID, bank.Response{Status: 201, Body: []byte(`{}`)})
		})
		if !errors.Is(err, idem.ErrLostLock) {
			t.Fatalf("server A: %v, want ErrLostLock", err)
		}
		const want = "Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1"
		if got := ledger(t, pool).Line(); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
}

// race sends n copies of one request to h at the same moment, each on its
// own goroutine, and returns the answers.
func race(t *testing.T, h *idem.Handler, n int) []bank.Response {
	t.Helper()
	ctx := bounded(t, fmt.Sprintf("%d copies of one request racing for its key", n))
	start := make(chan struct{})
	out := make([]bank.Response, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = h.Handle(ctx, idem.Request{UserID: 1, Key: "double-tap-0000000001", Body: body(1, 2, 1_000_000)})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("copy %d: %v (%v)", i, err, context.Cause(ctx))
		}
	}
	return out
}

// warm opens n connections so that the race is between requests, not
// between connection handshakes.
func warm(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := bounded(t, fmt.Sprintf("opening %d connections", n))
	conns := make([]*pgxpool.Conn, n)
	for i := range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err, context.Cause(ctx))
		}
		conns[i] = c
	}
	for _, c := range conns {
		c.Release()
	}
}

func TestHandlerConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	const n = 16
	tests := []struct {
		name     string
		conflict idem.ConflictPolicy
	}{
		{"Reject409", idem.Reject409},
		{"WaitForResult", idem.WaitForResult},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := newBank(t, n+2)
			warm(t, pool, n)
			h := &idem.Handler{DB: pool, Store: &idem.Store{}, Conflict: tt.conflict, WaitTimeout: 10 * time.Second}
			answers := race(t, h, n)

			fresh, replayed, inProgress := 0, 0, 0
			var receipt bank.Receipt
			for _, a := range answers {
				switch {
				case a.Status == 201 && !a.Replayed:
					fresh++
					receipt, _ = a.Receipt()
				case a.Status == 201 && a.Replayed:
					replayed++
				case a.Status == 409 && a.Code() == idem.CodeInProgress:
					inProgress++
				default:
					t.Errorf("unexpected answer %s", a.Summary())
				}
			}
			t.Logf("%d fresh 201, %d replayed 201, %d 409", fresh, replayed, inProgress)
			if fresh != 1 {
				t.Errorf("%d non-replayed 201s, want exactly 1", fresh)
			}
			if tt.conflict == idem.WaitForResult && replayed != n-1 {
				t.Errorf("%d replayed 201s under WaitForResult, want %d", replayed, n-1)
			}
			for _, a := range answers {
				if rc, ok := a.Receipt(); ok && a.Replayed && rc != receipt {
					t.Errorf("replayed receipt %+v differs from the original %+v", rc, receipt)
				}
			}
			l := ledger(t, pool)
			if len(l.Transfers) != 1 {
				t.Errorf("%d transfer rows, want exactly 1", len(l.Transfers))
			}
			if a := l.Accounts[0].BalanceKobo; a != 4_000_000 || l.Total() != 7_500_000 {
				t.Errorf("%s; want Ada at ₦40,000 and ₦75,000 in all", l.Line())
			}
			if k := keyRows(t, pool); k != 1 {
				t.Errorf("%d key rows, want 1", k)
			}
		})
	}
}

// TestKeyMisuseWithoutCoincidences reuses one key text every way a buggy
// client can, on a bank where users own two accounts and no account id
// equals its owner's user id: with another recipient, another of the same
// user's accounts as sender, another amount (each refused 422 and retried,
// refused again, moving nothing), and by two other users, one of whom sends
// Ada's very body. Keys are scoped per user, so each of those users gets the
// answer to their own request and nothing of Ada's.
func TestKeyMisuseWithoutCoincidences(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	const ada, bola, dayo = 1, 2, 4
	first := handle(t, h, ada, key, body(11, 21, 100_000))
	rc, ok := first.Receipt()
	if first.Status != 201 || !ok {
		t.Fatalf("Ada's first request: %s, want 201", first.Summary())
	}

	misuse := []struct {
		name string
		body []byte
	}{
		{"another recipient (account 2, Dayo's)", body(11, 2, 100_000)},
		{"another sender: Ada's savings, account 12", body(12, 21, 100_000)},
		{"another amount", body(11, 21, 100_001)},
	}
	for _, m := range misuse {
		for try := 1; try <= 2; try++ {
			resp := handle(t, h, ada, key, m.body)
			if resp.Status != 422 || resp.Code() != idem.CodeKeyReused || resp.Replayed {
				t.Errorf("%s, try %d: got %s, want 422 %s", m.name, try, resp.Summary(), idem.CodeKeyReused)
			}
		}
	}

	// Bola's own transfer under Ada's key text: a new transfer, not a replay.
	bolas := handle(t, h, bola, key, body(21, 11, 50_000))
	if brc, ok := bolas.Receipt(); bolas.Status != 201 || bolas.Replayed || !ok || brc.TransferID == rc.TransferID || brc.From != 21 {
		t.Errorf("Bola under Ada's key text: %s %s, want a 201 of his own", bolas.Summary(), bolas.Body)
	}
	// Dayo sends Ada's very body with Ada's key text: judged as Dayo's request,
	// from an account he does not own.
	dayos := handle(t, h, dayo, key, body(11, 21, 100_000))
	if dayos.Status != 404 || dayos.Code() != bank.CodeAccountNotFound || dayos.Replayed {
		t.Errorf("Dayo with Ada's body and key text: %s %s, want 404 %s", dayos.Summary(), dayos.Body, bank.CodeAccountNotFound)
	}

	// Ada's key still answers Ada's first request.
	again := handle(t, h, ada, key, body(11, 21, 100_000))
	if arc, _ := again.Receipt(); again.Status != 201 || !again.Replayed || arc != rc {
		t.Errorf("Ada's retry: %s %s, want her first receipt %+v replayed", again.Summary(), again.Body, rc)
	}
	l := ledger(t, pool)
	if len(l.Transfers) != 2 {
		t.Errorf("%d transfers, want 2 (Ada's and Bola's): %+v", len(l.Transfers), l.Transfers)
	}
	for id, want := range map[int64]int64{11: 4_950_000, 12: 2_000_000, 21: 550_000, 2: 100_000} {
		if got, _ := l.Balance(id); got != want {
			t.Errorf("account %d has %s, want %s", id, bank.Naira(got), bank.Naira(want))
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM idempotency_keys WHERE key = $1", key); n != 3 {
		t.Errorf("%d rows for the key text, want 3 (Ada's, Bola's, Dayo's)", n)
	}
}

// The closed-checked-last mistake refuses a closed account after the
// transfer has written: the refusal is stored in the request's transaction,
// as every refusal is, so the money moves under a 422 (and its retry is told
// that 422 again). The correct handler refuses first and moves nothing. A
// refusal the transfer's own checks make first (another user's account) and
// one the funds would make (a closed recipient asked for more than the
// sender has) are the closed rule's or theirs as the lesson orders them.
func TestClosedCheckedLastMovesTheMoneyItRefuses(t *testing.T) {
	t.Parallel()
	const ada, bola = 1, 2
	cases := []struct {
		name   string
		user   int64
		body   []byte
		status int
		code   string
		moves  bool // under the mistake
	}{
		{"Ada pays Bola's closed account", ada, body(11, 22, 100_000), 422, bank.CodeRecipientUnavailable, true},
		{"Bola pays from his closed account", bola, body(22, 11, 100_000), 422, bank.CodeAccountNotActive, true},
		{"Ada pays from Bola's closed account", ada, body(22, 11, 100_000), 404, bank.CodeAccountNotFound, false},
		{"Ada pays Bola's closed account more than she has", ada, body(11, 22, 6_000_000), 422, bank.CodeRecipientUnavailable, false},
	}
	for _, tt := range cases {
		for _, mistaken := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, mistake %v", tt.name, mistaken), func(t *testing.T) {
				t.Parallel()
				pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
				h := &idem.Handler{DB: pool, Store: &idem.Store{}, Bank: bank.Flaws{ClosedCheckedLast: mistaken}}
				for try := 1; try <= 2; try++ {
					resp := handle(t, h, tt.user, key, tt.body)
					if resp.Status != tt.status || resp.Code() != tt.code || resp.Replayed != (try == 2) {
						t.Errorf("try %d: %s, want %d %s (replayed on the retry)", try, resp.Summary(), tt.status, tt.code)
					}
				}
				moved := transfers(t, pool) > 0
				if want := mistaken && tt.moves; moved != want {
					t.Errorf("money moved: %v, want %v; %s", moved, want, ledger(t, pool).Line())
				}
				if l := ledger(t, pool); l.Total() != pgtest.MixedTotal {
					t.Errorf("total %s, want %s", bank.Naira(l.Total()), bank.Naira(pgtest.MixedTotal))
				}
			})
		}
	}
}

// meanwhile is side effects that record the transfer id they are given and,
// while the transfer's transaction is still open, commit another
// customer's transfer on a connection of their own: Dayo (user 4) pays
// Bola's account 21, two accounts the request does not lock.
type meanwhile struct {
	pool    *pgxpool.Pool
	told    []int64 // the ids the side effects were given
	dayo    []int64 // the ids of Dayo's transfers
	failure error
}

func (m *meanwhile) InTx(ctx context.Context, _ pgx.Tx, _ int64, rc bank.Receipt) error {
	m.told = append(m.told, rc.TransferID)
	var resp bank.Response
	err := bank.InTx(ctx, m.pool, func(tx pgx.Tx) error {
		var err error
		resp, err = bank.Transfer(ctx, tx, 4, bank.TransferRequest{From: 2, To: 21, AmountKobo: 10_000})
		return err
	})
	rc, ok := resp.Receipt()
	if err == nil && !ok {
		err = fmt.Errorf("Dayo's transfer: %s", resp.Summary())
	}
	if err != nil {
		m.failure = err
		return err
	}
	m.dayo = append(m.dayo, rc.TransferID)
	return nil
}

func (m *meanwhile) AfterCommit(context.Context, int64, bank.Receipt) {}

// The receipt-last-value mistake reads the answer's transfer id from the
// sequence's last_value, after the side effects: another customer's
// transfer that commits meanwhile (it took the next id) is the one the 201
// names, stored as the key's answer and replayed to the retry, while the
// side effects name the request's own. The correct handler, pipelined or
// one statement at a time, names its own transfer in all three.
func TestReceiptLastValueNamesAnotherCustomersTransfer(t *testing.T) {
	t.Parallel()
	const ada = 1
	cases := []struct {
		name        string
		unpipelined bool
		mistaken    bool
	}{
		{"correct, pipelined", false, false},
		{"correct, one statement at a time", true, false},
		{"mistake", false, true},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			m := &meanwhile{pool: pool}
			h := &idem.Handler{DB: pool, Store: &idem.Store{}, Effects: m, Unpipelined: tt.unpipelined,
				Bank: bank.Flaws{ReceiptLastValue: tt.mistaken}}
			first := handle(t, h, ada, key, body(11, 12, 100_000))
			if m.failure != nil {
				t.Fatal(m.failure)
			}
			again := handle(t, h, ada, key, body(11, 12, 100_000))
			var own int64
			for _, tr := range ledger(t, pool).Transfers {
				if tr.From == 11 && tr.To == 12 {
					own = tr.ID
				}
			}
			if own == 0 || len(m.dayo) != 1 || own == m.dayo[0] {
				t.Fatalf("Ada's transfer %d, Dayo's %v: want one each; %s", own, m.dayo, ledger(t, pool).Line())
			}
			if !slices.Equal(m.told, []int64{own}) {
				t.Errorf("the side effects were given transfers %v, want [%d], Ada's", m.told, own)
			}
			want := own
			if tt.mistaken {
				want = m.dayo[0]
			}
			rc, _ := first.Receipt()
			if first.Status != 201 || rc.TransferID != want {
				t.Errorf("Ada was told %s, want 201 transfer %d (Ada's is %d, Dayo's %d)", first.Summary(), want, own, m.dayo[0])
			}
			if !again.Replayed || string(again.Body) != string(first.Body) {
				t.Errorf("the retry was told %s (replayed %v), want the first answer's bytes, %s", again.Body, again.Replayed, first.Body)
			}
		})
	}
}

// The own-credit-in-second-transaction mistake credits a move between one
// customer's own accounts in a transaction of its own, after the
// transfer's commit: a snapshot of every balance taken between the two
// commits (here, at the AfterCommit hook, where a server that died would
// stop) is short by the amount. Once Handle returns the balances add up,
// and the retry's replay credits nothing more. A payment to another
// customer, and the correct handler's move, are whole at the hook.
func TestOwnCreditInSecondTransactionIsShortBetweenItsCommits(t *testing.T) {
	t.Parallel()
	const ada, bola = 1, 2
	cases := []struct {
		name     string
		mistaken bool
		user     int64
		body     []byte
		short    bool
	}{
		{"correct handler, Ada to her savings", false, ada, body(11, 12, 100_000), false},
		{"the mistake, Ada to her savings", true, ada, body(11, 12, 100_000), true},
		{"the mistake, Bola to Ada's savings", true, bola, body(21, 12, 100_000), false},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			h := &idem.Handler{DB: pool, Store: &idem.Store{}, Bank: bank.Flaws{OwnCreditInSecondTransaction: tt.mistaken}}
			var between []int64
			hooks := idem.Hooks{AfterCommit: func(context.Context) { between = append(between, ledger(t, pool).Total()) }}
			ctx := idem.WithHooks(bounded(t, tt.name), hooks)
			for try := 1; try <= 2; try++ {
				resp, err := h.Handle(ctx, idem.Request{UserID: tt.user, Key: key, Body: tt.body})
				if err != nil || resp.Status != 201 || resp.Replayed != (try == 2) {
					t.Fatalf("try %d: %s, %v; want 201 (replayed on the retry)", try, resp.Summary(), err)
				}
			}
			want := int64(pgtest.MixedTotal)
			if tt.short {
				want -= 100_000
			}
			if len(between) != 1 || between[0] != want {
				t.Errorf("the totals between the commits (one transfer committed): %v, want [%d]", between, want)
			}
			l := ledger(t, pool)
			if l.Total() != pgtest.MixedTotal || transfers(t, pool) != 1 {
				t.Errorf("in the end: %s; want ₦99,000 and one transfer", l.Line())
			}
			for _, c := range bank.CheckInvariants(pgtest.MixedAccounts, l, nil) {
				if !c.OK {
					t.Errorf("invariant %q broken in the end: %s", c.Name, c.Detail)
				}
			}
		})
	}
}

// The no-balance-floor mistake's read (OwnFundsReadOnArrival) is the
// handler's: it reads the sender's balance as the request arrives, before
// the key is claimed, and the transfer checks a move between the
// customer's own accounts on it. Ada's savings hold ₦20,000 when her move of ₦15,000 to
// her current account arrives; once its key is claimed (here, at the
// AfterClaim hook) she pays Bola ₦10,000 from them; the move, checked on
// the ₦20,000, leaves ₦-5,000 on a bank without the balance's CHECK. The
// correct handler refuses it for funds.
func TestOwnFundsReadOnArrivalMissesADebitAfterTheRead(t *testing.T) {
	t.Parallel()
	const ada = 1
	for _, mistaken := range []bool{false, true} {
		t.Run(fmt.Sprintf("mistaken %v", mistaken), func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			ctx := bounded(t, "a move checked on the balance read on arrival")
			if _, err := pool.Exec(ctx, bank.DropBalanceFloorSQL); err != nil {
				t.Fatal(err)
			}
			h := &idem.Handler{DB: pool, Store: &idem.Store{}, Bank: bank.Flaws{OwnFundsReadOnArrival: mistaken}}
			pay := func(context.Context, idem.Claim) {
				resp, err := (&idem.Handler{DB: pool, Store: &idem.Store{}}).Handle(ctx, idem.Request{UserID: ada, Key: "ada-pays-bola-0001", Body: body(12, 21, 1_000_000)})
				if err != nil || resp.Status != 201 {
					t.Errorf("Ada paying Bola ₦10,000 from her savings: %s, %v; want 201", resp.Summary(), err)
				}
			}
			resp, err := h.Handle(idem.WithHooks(ctx, idem.Hooks{AfterClaim: pay}), idem.Request{UserID: ada, Key: key, Body: body(12, 11, 1_500_000)})
			want, savings := "422 "+bank.CodeInsufficientFunds, int64(1_000_000)
			if mistaken {
				want, savings = "201", -500_000
			}
			if err != nil || !strings.HasPrefix(resp.Summary(), want) {
				t.Errorf("the move of ₦15,000 from the savings: %s, %v; want %s", resp.Summary(), err, want)
			}
			if got, _ := ledger(t, pool).Balance(12); got != savings {
				t.Errorf("Ada's savings hold %s, want %s", bank.Naira(got), bank.Naira(savings))
			}
		})
	}
}
