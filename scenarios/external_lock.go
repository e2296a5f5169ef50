package scenarios

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

// The article's Redis lock in front of the key store: SET NX PX 30 s before
// the work, compare-and-delete after. Server A takes the lock and the key and
// stalls past both expiries; server B, the retry, takes both and stalls too;
// A wakes and finishes. A lock outside the database cannot stop A: it no
// longer holds it and does not know. The key row's fencing token in
// PostgreSQL can: A's commit fails, B's stands. And A's release, a
// compare-and-delete, leaves B's lock alone.
func init() {
	t0 := time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC)
	const ttl = 30 * time.Second
	story := func(ctx context.Context, r *Run, w *World, noFencing bool) (aErr error, third, last bank.Response, err error) {
		clock := r.Clock(t0)
		locks := outbox.NewLocks(clock.Now)
		h := r.Handler(clock)
		h.Store.Flaws.NoFencing = h.Store.Flaws.NoFencing || noFencing
		servers := 0
		locked := func(ctx context.Context, req idem.Request) (bank.Response, error) {
			servers++
			name := string(rune('A' + servers - 1))
			lk, ok := locks.AcquireWith(ctx, fmt.Sprintf("idem-lock:%d:%s", req.UserID, req.Key), w.Token("lock-"+name), ttl, w.Flaws)
			if !ok {
				r.Server("server %s: SET NX finds the lock held: 409", name)
				return idem.InProgress(), nil
			}
			r.Server("server %s: SET NX PX 30000 took the lock (%s)", name, lk.Token)
			defer func() {
				if locks.Release(lk, w.Flaws) {
					r.Server("server %s released its lock", name)
				} else {
					r.Server("server %s's compare-and-delete found another token: it deleted nothing", name)
				}
			}()
			return h.Handle(ctx, req)
		}
		crash := &faults.CrashAfterClaim{}
		r.Defer(crash.KillAll)
		net := faults.NewNetwork(locked, r.Uint64(), clock).On(crash, 1, 2)
		net.Env.Note = r.Server
		in := r.AdaTap("ada-pays-bola")

		r.Step("Ada sends %s: server A takes the Redis lock and the key, then stalls", bank.Naira(r.Amount()))
		if _, err := r.Send(ctx, net, in, 1, ""); err == nil {
			return nil, third, last, errors.New("server A should have stalled")
		}
		clock.Advance(31 * time.Second)
		r.Step("31 s later both have expired: her retry's server B takes them, and stalls too")
		if _, err := r.Send(ctx, net, in, 2, ""); err == nil {
			return nil, third, last, errors.New("server B should have stalled")
		}
		sleepers := crash.Sleepers()
		if len(sleepers) != 2 {
			return nil, third, last, fmt.Errorf("expected two stalled servers, found %d", len(sleepers))
		}
		_, aErr = sleepers[0].Wake()
		switch {
		case errors.Is(aErr, idem.ErrLostLock):
			r.Step("server A wakes up: the fencing check in PostgreSQL fails, and it rolls back")
		case aErr != nil:
			r.Step("server A wakes up and fails: %v", errors.Unwrap(aErr))
		default:
			r.Step("server A wakes up: nothing stops it, and it commits its transfer")
		}
		r.Step("Ada taps again while B is still working")
		third, _ = r.Send(ctx, net, in, 3, "")
		switch bResp, err := sleepers[1].Wake(); {
		case err != nil:
			r.Step("server B wakes up and fails: %v; Ada taps once more", errors.Unwrap(err))
		case bResp.Status == 201:
			r.Step("server B wakes up and commits; Ada taps once more")
		default:
			r.Step("server B wakes up and answers %s; Ada taps once more", Describe(bResp))
		}
		last, _ = r.Send(ctx, net, in, 4, "")
		w.Check(ctx, outbox.World{Locks: locks})
		return aErr, third, last, nil
	}

	Register(Scenario{
		Name:    "external-lock",
		Title:   "A lock outside the database",
		Article: "Phase 2, “Add Redis only when there is a reason”",
		Order:   OrderArticleLock,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "the lock lives outside the database; its holder pauses past the expiry, another takes it, both proceed: the key row's fencing in PostgreSQL stops the late commit",
		Explain: Explanation{
			Shows: "In front of the key store, each server takes a lock in Redis (SET NX PX 30000, " +
				"released with a compare-and-delete of its own token), as the article does. Server A " +
				"takes the lock and Ada's key and stalls; 31 s later her retry reaches server B, which " +
				"takes both over and stalls too; then A wakes up.",
			Breaks: "A lock that expires cannot tell its holder that it has: A carries on as if it still " +
				"held it, and so does B. The lock outside the database has already let both through, " +
				"and nothing it can do stops A's transfer from committing next to B's.",
			Defence: "The check that stops A must be made where A commits: the key row's fencing token " +
				"in PostgreSQL. B's takeover wrote a new token; A completes the key only WHERE the " +
				"token is still its own, finds it is not, and rolls back with its transfer. The " +
				"compare-and-delete release keeps A from deleting B's lock on its way out.",
			SQL: "-- in the transfer's transaction, the holder completes its key:\n" +
				"UPDATE idempotency_keys SET status = 'completed', lock_id = NULL\n" +
				" WHERE user_id = $1 AND key = $2 AND lock_id = $3;\n" +
				"-- 0 rows: another server took the key over: ROLLBACK\n" +
				"-- the lock's release, in Redis (a script):\n" +
				"--   if GET(key) == token then DEL(key) end",
		},
		Phases: []Phase{{
			Title:   "without protection: the lock outside the database alone, no fencing token on the key row",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				_, _, _, err := story(ctx, r, r.World(), true)
				var n int
				qerr := r.DB.QueryRow(ctx, "SELECT count(*) FROM transfers").Scan(&n)
				// The lesson's table of mistakes: "A lock expiry but no
				// fencing token".
				r.Lesson().Expect(qerr == nil && n == 2, "a slow server and the retry that took over both commit their transfer (%s)", plural(n, "transfer", "transfers"))
				return err
			},
		}, {
			Title: "with protection: the lock outside, compare-and-delete to release it, and the fencing token in PostgreSQL",
			Run: func(ctx context.Context, r *Run) error {
				aErr, third, last, err := story(ctx, r, r.World(), false)
				r.Expect(errors.Is(aErr, idem.ErrLostLock), "server A fails the fencing check in PostgreSQL and rolls back")
				r.Expect(third.Status == 409, "the tap while B works: 409, B's lock and claim are valid")
				r.Expect(last.Status == 201 && last.Replayed, "the last tap: B's transfer, replayed")
				r.ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
				r.ExpectTransfers(ctx, 1)
				return err
			},
		}},
	})
}
