package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// One event delivered to eight consumers of one group at the same moment (a
// rebalance that left the old owner running, and redeliveries): the
// processed-events marker lets exactly one apply it. Without the marker
// every delivery applies it.
func TestConsumerDedupUnderConcurrentRedelivery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		flaws   outbox.Flaws
		applied int
	}{{"with the marker", outbox.Flaws{}, 1}, {"without it", outbox.Flaws{NoDedup: true}, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewBank(t, 8)
			value, _ := json.Marshal(outbox.Event{Type: "transfer.created",
				Receipt: bank.Receipt{TransferID: 1, From: 1, To: 2, AmountKobo: 1_000_000}})
			rec := outbox.Record{Topic: outbox.TransfersTopic, ID: "evt-1", TransferID: 1, Value: value}
			c := &outbox.Consumer{DB: pool, Name: "notifier", Flaws: tc.flaws}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := make(chan struct{})
			var mu sync.Mutex
			applied := 0
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := c.Apply(ctx, rec)
					if err != nil {
						t.Error(err)
					}
					if ok {
						mu.Lock()
						applied++
						mu.Unlock()
					}
				}()
			}
			close(start)
			wg.Wait()
			n := count(t, pool, "SELECT count(*) FROM notifications WHERE event_id = 'evt-1' AND account_id = 2 AND text = 'You received ₦10,000 from Ada'")
			if applied != tc.applied || n != tc.applied {
				t.Errorf("applied %d times, %d notifications; want %d", applied, n, tc.applied)
			}
		})
	}
}

// The consumer's two steps in order: a crash between them leaves the
// effect committed and the offset not, so the event comes back and is
// skipped; with the offset first, the same crash loses the event.
func TestConsumerCrashBetweenEffectAndOffset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		flaws     outbox.Flaws
		redeliver int // records the restarted consumer is delivered
		effects   int // notifications for the crashed event
	}{
		{"effect first", outbox.Flaws{}, 1, 1},
		{"offset first", outbox.Flaws{OffsetBeforeEffect: true}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewBank(t, 4)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := oneEvent(ctx, t)
			crash := errors.New("crash")
			c := &outbox.Consumer{DB: pool, Name: "notifier", Flaws: tc.flaws,
				Between: func(context.Context, outbox.Record) error { return crash }}
			if _, _, err := c.Run(ctx, l.Join("notifier", outbox.TransfersTopic)); !errors.Is(err, crash) {
				t.Fatalf("run: %v, want the crash", err)
			}
			again := l.Join("notifier", outbox.TransfersTopic).Poll(10)
			if len(again) != tc.redeliver {
				t.Errorf("redelivered %d records, want %d", len(again), tc.redeliver)
			}
			if n := count(t, pool, "SELECT count(*) FROM notifications"); n != tc.effects {
				t.Errorf("%d notifications, want %d", n, tc.effects)
			}
		})
	}
}

// A consumer that dies at its first chance before the offset commit: the
// correct one commits the marker with the effect, so it dies after both,
// and the redelivery is skipped; marker-after-effect commits the marker in
// a transaction of its own, dies between the two commits, and the
// redelivery finds no marker and notifies Bola a second time.
func TestConsumerCrashBeforeItsMarker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		flaws   outbox.Flaws
		applied int // by the restarted consumer
		effects int // notifications for the event
	}{
		{"marker with the effect", outbox.Flaws{}, 0, 1},
		{"marker after the effect", outbox.Flaws{MarkerAfterEffect: true}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBank(t, 4)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := oneEvent(ctx, t)
			crash := errors.New("crash")
			dies := func(context.Context, outbox.Record) error { return crash }
			c := &outbox.Consumer{DB: pool, Name: "notifier", Flaws: tc.flaws, Between: dies, AfterEffect: dies}
			if _, _, err := c.Run(ctx, l.Join("notifier", outbox.TransfersTopic)); !errors.Is(err, crash) {
				t.Fatalf("run: %v, want the crash", err)
			}
			c.Between, c.AfterEffect = nil, nil
			applied, skipped, err := c.Run(ctx, l.Join("notifier", outbox.TransfersTopic))
			if err != nil {
				t.Fatal(err)
			}
			if applied != tc.applied || skipped != 1-tc.applied {
				t.Errorf("restarted: applied %d, skipped %d; want applied %d", applied, skipped, tc.applied)
			}
			if n := count(t, pool, "SELECT count(*) FROM notifications WHERE event_id = 'evt-1' AND account_id = 2"); n != tc.effects {
				t.Errorf("%d notifications, want %d", n, tc.effects)
			}
			if n := count(t, pool, "SELECT count(*) FROM processed_events WHERE event_id = 'evt-1'"); n != 1 {
				t.Errorf("%d markers, want 1", n)
			}
		})
	}
}

// The transfer's outbox rows exist if and only if its transaction commits:
// a failure just before COMMIT leaves none; a success leaves one SMS row and
// one event row; its replay adds nothing.
func TestEffectsRowsCommitWithTheTransfer(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewBank(t, 4)
	p, l := outbox.NewProvider(1), outbox.NewLog(3)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, Effects: &outbox.Effects{DB: pool, SMS: p, Log: l}}
	req := idem.Request{UserID: 1, Key: "effects-test-key-0001", Body: bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}.Body()}
	failing := idem.WithHooks(context.Background(), idem.Hooks{BeforeCommit: func(context.Context) error { return errors.New("boom") }})
	if _, err := h.Handle(failing, req); err == nil {
		t.Fatal("the failing transaction committed")
	}
	if n := count(t, pool, "SELECT count(*) FROM outbox"); n != 0 {
		t.Fatalf("%d outbox rows after a rollback, want 0", n)
	}
	for range 2 {
		if resp, err := h.Handle(context.Background(), req); err != nil || resp.Status != 201 {
			t.Fatalf("transfer: %v %v", resp, err)
		}
	}
	var kinds []string
	rows, _ := pool.Query(context.Background(), "SELECT kind || ':' || transfer_id || ':' || payload FROM outbox ORDER BY id")
	kinds, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(kinds) != 2 || kinds[0] != "sms:2:You sent ₦10,000 to Bola" || kinds[1][:8] != "event:2:" {
		t.Errorf("outbox rows %q, want the SMS and the event of transfer 2", kinds)
	}
	if len(p.Messages()) != 0 || len(l.Records(outbox.TransfersTopic)) != 0 {
		t.Error("something was sent before a dispatcher ran")
	}
}

// Every committed transfer writes its event row, a move between one user's
// own accounts too; the no-event-for-own-accounts mistake writes none for
// that move (Ada's savings to her current account), and still writes the
// SMS row, and the event of a transfer to another user.
func TestEveryTransferWritesItsEventRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		flaws  outbox.Flaws
		events string // the transfers with an event row
	}{
		{"correct", outbox.Flaws{}, "1,2"},
		{"no event between own accounts", outbox.Flaws{NoEventForOwnAccounts: true}, "2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewBankWith(t, pgtest.BankOptions{Accounts: pgtest.MixedAccounts})
			h := &idem.Handler{DB: pool, Store: &idem.Store{},
				Effects: &outbox.Effects{DB: pool, SMS: outbox.NewProvider(1), Log: outbox.NewLog(3), Flaws: tc.flaws}}
			for i, body := range []bank.TransferRequest{{From: 12, To: 11, AmountKobo: 150_000}, {From: 11, To: 21, AmountKobo: 100_000}} {
				req := idem.Request{UserID: 1, Key: fmt.Sprintf("own-accounts-key-%04d", i), Body: body.Body()}
				if resp, err := h.Handle(context.Background(), req); err != nil || resp.Status != 201 {
					t.Fatalf("transfer %+v: %v %v", body, resp, err)
				}
			}
			var events, sms string
			if err := pool.QueryRow(context.Background(), `
				SELECT coalesce(string_agg(transfer_id::text, ',' ORDER BY transfer_id) FILTER (WHERE kind = 'event'), ''),
				       coalesce(string_agg(transfer_id::text, ',' ORDER BY transfer_id) FILTER (WHERE kind = 'sms'), '')
				FROM outbox`).Scan(&events, &sms); err != nil {
				t.Fatal(err)
			}
			if events != tc.events || sms != "1,2" {
				t.Errorf("event rows for transfers %q, SMS rows for %q; want events for %q, SMS for 1,2", events, sms, tc.events)
			}
		})
	}
}

// The lesson's ship.js, then eight copies of one request at once: exactly
// one answers "shipped".
func TestMarkShipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		flaws   outbox.Flaws
		shipped int
	}{{"conditional update", outbox.Flaws{}, 1}, {"read then write", outbox.Flaws{ShipReadThenWrite: true}, 8}} {
		t.Run(tc.name, func(t *testing.T) {
			pool := pgtest.NewBank(t, 8)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := pool.Exec(ctx, "INSERT INTO orders VALUES (1, 'paid'), (2, 'cancelled'), (4, 'paid')"); err != nil {
				t.Fatal(err)
			}
			s := &outbox.Shipping{DB: pool, Flaws: tc.flaws}
			var got []string
			for _, id := range []int{1, 1, 2, 3} {
				a, err := s.MarkShipped(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, a)
			}
			if want := []string{"shipped", "already shipped (ok)", "error: order is cancelled", "error: order is missing"}; !equal(got, want) {
				t.Errorf("ship.js printed %q, want %q", got, want)
			}
			// All eight read before any writes (only the read-then-write
			// mistake has a point between the two).
			var read sync.WaitGroup
			read.Add(8)
			allRead := make(chan struct{})
			go func() { read.Wait(); close(allRead) }()
			s.AfterRead = func() {
				read.Done()
				select {
				case <-allRead:
				case <-time.After(10 * time.Second):
					t.Error("waited 10s for all eight copies to read")
				}
			}
			answers := make([]string, 8)
			var wg sync.WaitGroup
			for i := range answers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					if answers[i], err = s.MarkShipped(ctx, 4); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			shipped := 0
			for _, a := range answers {
				if a == outbox.Shipped {
					shipped++
				} else if a != outbox.AlreadyShipped {
					t.Errorf("answer %q", a)
				}
			}
			if shipped != tc.shipped {
				t.Errorf("%d of 8 copies answered shipped, want %d", shipped, tc.shipped)
			}
		})
	}
}

// oneEvent is a log of one partition holding one transfer's event, evt-1.
func oneEvent(ctx context.Context, t *testing.T) *outbox.Log {
	t.Helper()
	l := outbox.NewLog(1)
	value, _ := json.Marshal(outbox.Event{Type: "transfer.created",
		Receipt: bank.Receipt{TransferID: 1, From: 1, To: 2, AmountKobo: 100}})
	if _, err := l.Publish(ctx, outbox.TransfersTopic, "account-1", "evt-1", 1, value); err != nil {
		t.Fatal(err)
	}
	return l
}
