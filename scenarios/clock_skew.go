package scenarios

import (
	"context"
	"errors"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// Three copies of the server share one database, and their clocks disagree,
// as the clocks of real machines do: A's is right, B's runs 31 s ahead, C's
// 25 h behind. A lock's expiry and a key's age must mean the same to all of
// them.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	story := func(ctx context.Context, r *Run, appClock, protected bool) error {
		clock := r.Clock(t0)
		server := func(skew time.Duration) *idem.Handler {
			h := r.Handler(clock)
			h.Now = func() time.Time { return clock.Now().Add(skew) }
			h.Store.Flaws.AppClock = appClock
			return h
		}
		a, b, c := server(0), server(31*time.Second), server(-25*time.Hour)

		r.Step("Ada sends %s through server A, which claims the key and is still working", bank.Naira(r.Amount()))
		crash := &faults.CrashAfterClaim{}
		r.Defer(crash.KillAll)
		tap := r.AdaTap("ada-pays-bola")
		_, _ = r.Send(ctx, r.NetworkTo("server A", a, clock).On(crash, 1), tap, 1, "")
		sleepers := crash.Sleepers()
		if !r.Expect(len(sleepers) == 1, "server A holds the key") {
			return nil
		}
		r.Step("moments later her app retries through server B, whose clock runs 31 s ahead")
		viaB := r.NetworkTo("server B", b, clock)
		early, _ := r.Send(ctx, viaB, tap, 2, "")
		_, aerr := sleepers[0].Wake()
		if aerr != nil {
			r.Step("server A finishes: %v", errors.Unwrap(aerr))
		} else {
			r.Step("server A finishes its transfer")
		}
		again, _ := r.Send(ctx, viaB, tap, 3, "")

		r.Step("Ada sends ₦2,000 through server C, whose clock runs 25 h behind; the response is lost")
		two := Intent{Label: "ada-two-thousand", UserID: 1, Key: r.Key(), Request: bank.TransferRequest{From: 1, To: 2, AmountKobo: 200_000}}
		_, _ = r.Send(ctx, r.NetworkTo("server C", c, clock).On(&faults.LoseResponse{}, 1), two, 1, "")
		clock.Advance(time.Hour)
		r.Step("an hour later the cleanup job runs on server A: keys older than 24 h go")
		deleted, err := a.Store.Cleanup(ctx, r.DB, idem.DefaultRetention, a.Now())
		if err != nil {
			return err
		}
		r.Step("deleted: %s", keyList(deleted))
		r.Step("Ada's app retries the ₦2,000 through server A")
		retry, _ := r.Send(ctx, r.NetworkTo("server A", a, clock), two, 2, "")

		if protected {
			r.Expect(early.Status == 409 && early.Code() == idem.CodeInProgress,
				"server B is told 409: A's lock is valid on the database's clock, whatever B's own says")
			r.Expect(aerr == nil, "server A keeps its key and commits its transfer")
			r.Expect(again.Status == 201 && again.Replayed, "Ada's next retry is A's answer, replayed")
			r.Expect(len(deleted) == 0, "the cleanup keeps the key server C wrote an hour ago")
			r.Expect(retry.Status == 201 && retry.Replayed, "the ₦2,000 retry is replayed, not repeated")
			r.ExpectBalances(ctx, 5_000_000-r.Amount()-200_000, 500_000+r.Amount()+200_000, 2_000_000)
			r.ExpectTransfers(ctx, 2)
		}
		return nil
	}

	Register(Scenario{
		Name:   "clock-skew",
		Title:  "Servers whose clocks disagree",
		Amount: AdaPaysBola.AmountKobo,
		Explain: Explanation{
			Shows: "Three copies of the server share one database, and their clocks disagree, as real " +
				"machines' clocks do: A's is right, B's runs 31 s ahead, C's 25 h behind. Ada's retry goes " +
				"to B while A still holds her key; a key written by C meets A's cleanup job.",
			Breaks: "If each server measures locks and key ages on its own clock, B thinks A's fresh lock " +
				"expired and takes the key over, and the cleanup job thinks C's new key is a day old and " +
				"deletes it — whose retry then transfers again.",
			Defence: "Measure every lock and every key age on one clock that all servers share: the " +
				"database's. The SQL reads bank_now() (now(), unless the simulator stopped it) instead of " +
				"a time passed in by the app.",
			SQL: "INSERT INTO idempotency_keys (…, locked_until, created_at)\n" +
				"SELECT …, bank_now() + interval '30 seconds', bank_now() …;\n" +
				"DELETE FROM idempotency_keys\n" +
				" WHERE created_at < bank_now() - interval '24 hours' AND …;",
		},
		Summary: "three servers whose clocks disagree: on their own clocks, B takes over a valid lock and the cleanup deletes a fresh key, whose retry moves money again",
		Phases: []Phase{{
			Title:   "without protection: locks and key ages on each app server's own clock",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, true, false)
			},
		}, {
			Title: "with protection: locks and key ages on the database's clock",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, false, true)
			},
		}},
	})
}
