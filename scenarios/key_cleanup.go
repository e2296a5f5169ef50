package scenarios

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// The nightly job that deletes old keys, on the lesson's three keys: one
// completed two days ago, one completed an hour ago, one stuck in progress for
// two days with its lock long expired. Then the app retries the recent intent,
// whose first response it never received.
func init() {
	now := time.Date(2026, 9, 24, 3, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, retention time.Duration, protected bool) error {
		clock := r.Clock(now.Add(-48 * time.Hour))
		h := r.Handler(clock)
		net := r.Network(h, clock)
		old := Intent{Label: "ada-two-days-ago", UserID: 1, Key: "old-completed-0001",
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 100_000}}
		stuck := Intent{Label: "ada-stuck", UserID: 1, Key: "old-stuck-000000001",
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 300_000}}
		recent := Intent{Label: "ada-an-hour-ago", UserID: 1, Key: "new-completed-0001",
			Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 200_000}}

		r.Step("two days ago: Ada sent ₦1,000 (key %s), and a server claimed %s and crashed", old.Key, stuck.Key)
		if _, err := r.SendSetup(ctx, net, old, 1, ""); err != nil {
			return err
		}
		crash := &faults.CrashAfterClaim{}
		r.Defer(crash.KillAll)
		_, _ = r.SendSetup(ctx, r.Network(h, clock).On(crash, 1), stuck, 1, "")
		for _, s := range crash.Sleepers() {
			s.Kill()
		}

		clock.Advance(47 * time.Hour)
		r.Step("an hour ago: Ada sent ₦2,000 (key %s); the answer was lost", recent.Key)
		_, _ = r.SendSetup(ctx, r.Network(h, clock).On(&faults.LoseResponse{}, 1), recent, 1, "")

		clock.Advance(time.Hour)
		r.Step("03:00: the cleanup job deletes keys older than %s that are completed or whose lock expired", retentionText(retention))
		deleted, err := h.Store.Cleanup(ctx, r.DB, retention, clock.Now())
		if err != nil {
			return err
		}
		slices.Sort(deleted)
		kept, err := keys(ctx, r)
		if err != nil {
			return err
		}
		r.Step("deleted: %s · kept: %s", keyList(deleted), keyList(kept))
		r.Step("Ada's app retries the ₦2,000 with its key")
		resp, _ := r.Send(ctx, net, recent, 2, "")
		if protected {
			r.Lesson().Expect(slices.Equal(deleted, []string{old.Key, stuck.Key}), "deleted: the old completed key and the old stuck key")
			r.Lesson().Expect(slices.Equal(kept, []string{recent.Key}), "kept: the key completed an hour ago")
			r.Expect(resp.Status == 201 && resp.Replayed, "the retry is replayed, not repeated")
			r.ExpectBalances(ctx, 4_700_000, 800_000, 2_000_000)
			r.ExpectTransfers(ctx, 2)
		}
		return nil
	}

	Register(Scenario{
		Name:    "key-cleanup",
		Title:   "Clean up old keys",
		Lesson:  "Practice: clean up old keys",
		Order:   OrderPractice + 20,
		Summary: "the 24 h cleanup job deletes the old completed and the old stuck key, keeps the recent one, whose retry is still replayed",
		Explain: Explanation{
			Shows: "The nightly job that deletes old idempotency keys, on three keys: one completed two days " +
				"ago, one stuck in progress for two days (its server crashed; its lock long expired), and " +
				"one completed an hour ago whose answer Ada's app never received. After the job, the app " +
				"retries that last one.",
			Breaks: "A job that forgets the age limit deletes the recent key too. Its retry then finds no key, " +
				"claims it afresh and transfers again: the key was deleted while a retry could still come.",
			Defence: "Delete only keys older than the retention (24 h covers every realistic retry) that are " +
				"completed or whose lock has expired — never one whose lock is still valid, since its holder " +
				"may be about to complete it. Age and expiry are read on the database's clock, and " +
				"created_at is indexed for the job.",
			SQL: "DELETE FROM idempotency_keys\n" +
				" WHERE created_at < bank_now() - interval '24 hours'\n" +
				"   AND (status = 'completed' OR locked_until < bank_now())\n" +
				"RETURNING key;",
		},
		Phases: []Phase{{
			Title:   "without protection: the job forgets the 24 h age limit",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, 0, false)
			},
		}, {
			Title: "with protection: only keys older than 24 h, never one with a valid lock",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, idem.DefaultRetention, true)
			},
		}},
	})
}

func retentionText(d time.Duration) string {
	if d == 0 {
		return "0 s (no age limit)"
	}
	return Dur(d)
}

// keyList spells keys for the story: "a, b" or "none".
func keyList(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return strings.Join(keys, ", ")
}

func keys(ctx context.Context, r *Run) ([]string, error) {
	rows, err := r.DB.Query(ctx, "SELECT key FROM idempotency_keys ORDER BY key")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
