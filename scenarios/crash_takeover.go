package scenarios

import (
	"context"
	"errors"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Server A claims the key and goes silent. A retry 10 s later is told to
// wait; one at 31 s finds the lock expired, takes the key over and makes the
// transfer. Then A wakes up and tries to finish.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, flaws idem.Flaws, protected bool) error {
		clock := r.Clock(t0)
		h := r.Handler(clock)
		h.Store.Flaws = flaws
		crash := &faults.CrashAfterClaim{}
		r.Defer(crash.KillAll)
		serverA := r.NetworkTo("server A", h, clock).On(crash, 1)
		serverB := r.NetworkTo("server B", h, clock)
		in := Intent{Label: "ada-crash", UserID: 1, Key: "crash-demo-00000000001",
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: r.Amount()}}

		r.Step("Ada sends %s; server A claims the key and goes silent: her app times out", bank.Naira(in.Request.AmountKobo))
		_, err := r.SendSetup(ctx, serverA, in, 1, "")
		sleepers := crash.Sleepers()
		if !r.Expect(err != nil && len(sleepers) == 1, "server A is stuck holding the key") {
			return nil
		}
		clock.Advance(10 * time.Second)
		early, _ := r.Send(ctx, serverB, in, 2, "retry after 10 s")
		// A step of its own: --step stops between the 409 and the takeover,
		// where the class can guess what the next retry gets.
		clock.Advance(21 * time.Second)
		r.Step("21 s later her app retries again: 31 s after server A's claim, and its lock lasts 30 s")
		late, _ := r.Send(ctx, serverB, in, 3, "retry after 31 s")

		_, aerr := sleepers[0].Wake()
		if aerr != nil {
			r.Step("server A wakes up: %v", errors.Unwrap(aerr))
		} else {
			r.Step("server A wakes up and commits its transfer too")
		}
		if protected {
			lesson := r.Lesson()
			lesson.Expect(early.Status == 409 && early.Code() == idem.CodeInProgress, "after 10 s: 409 request_in_progress")
			lesson.Expect(late.Status == 201 && !late.Replayed, "after 31 s: the lock has expired; the retry takes over and transfers")
			lesson.Expect(errors.Is(aerr, idem.ErrLostLock), "server A fails the fencing check and rolls back")
			lesson.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
			lesson.ExpectTransfers(ctx, 1)
		}
		return nil
	}

	Register(Scenario{
		Name:    "crash-takeover",
		Title:   "A server that crashes, and one that is only slow",
		Lesson:  "A server that crashes, and one that is only slow",
		Order:   OrderCrash,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "a server claims the key and goes silent: 409 at +10 s, takeover at +31 s, and the late server fails the fencing check and rolls back",
		Explain: Explanation{
			Shows: "Server A claims Ada's key and then stops, before its transaction commits. Her app " +
				"retries after 10 seconds and after 31; then server A turns out to have been only slow, and " +
				"tries to finish. The clock is moved by hand, so the 31 seconds take no time.",
			Breaks: "The key's lock expires after 30 seconds, so a crashed server cannot block the key " +
				"forever: the retry at +31 s takes it over and transfers. But without a fencing token nothing " +
				"stops server A when it wakes: its transaction commits too, and the money moves twice.",
			Defence: "Each claim writes a fresh random lock_id — a fencing token. Completing a key is an " +
				"UPDATE that matches the caller's own lock_id; after a takeover server A's no longer " +
				"matches, the UPDATE changes no row, and server A rolls back its whole transaction, transfer " +
				"included. The lock outlives a normal request; the token keeps a slow one harmless.",
			SQL: "-- take over only an expired lock, with a new token:\n" +
				"UPDATE idempotency_keys\n" +
				"   SET lock_id = $3, locked_until = bank_now() + interval '30 seconds'\n" +
				" WHERE user_id = $1 AND key = $2\n" +
				"   AND status = 'in_progress' AND locked_until < bank_now();\n" +
				"-- complete only with one's own token (no row: ROLLBACK):\n" +
				"UPDATE idempotency_keys SET status = 'completed', …\n" +
				" WHERE user_id = $1 AND key = $2 AND lock_id = $3;",
		},
		Phases: []Phase{{
			Title:   "without protection: a lock that expires, but no fencing token",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, idem.Flaws{NoFencing: true}, false)
			},
		}, {
			Title: "with protection: lock expiry plus a fencing token checked at completion",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, idem.Flaws{}, true)
			},
		}},
	})
}
