package scenarios

import (
	"context"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// Two copies of one request at the same moment, each on its own goroutine
// and its own pooled connection, so they truly overlap in PostgreSQL. The
// overlap is staged, not hoped for: copy 1 stops at the point that matters
// (with its key claimed, or with its account rows locked) until copy 2 has
// reached it too, so every run shows the same race.
func init() {
	// staged sends the two copies: copy 1 under hold1, which closes held
	// where it stops, and copy 2 once copy 1 is held. hold2 prepares copy
	// 2's context and says when copy 2 has got where the story needs it (nil:
	// when copy 2 has been answered); then copy 1 carries on.
	type stage struct {
		hold1 func(ctx context.Context, held chan<- struct{}, release <-chan struct{}) context.Context
		hold2 func(ctx context.Context, copy1Done <-chan struct{}) (context.Context, <-chan struct{})
	}
	twice := func(ctx context.Context, r *Run, h *idem.Handler, in Intent, st stage) ([2]bank.Response, error) {
		net := r.Network(h, nil)
		var answers [2]bank.Response
		held, release, done1 := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		defer free()
		go func() {
			defer close(done1)
			answers[0], _ = r.Send(st.hold1(ctx, held, release), net, in, 1, "copy 1")
		}()
		if err := await(ctx, held, "copy 1 to hold its place"); err != nil {
			return answers, err
		}
		ctx2, copy2There := st.hold2(ctx, done1)
		done2 := make(chan struct{})
		go func() {
			defer close(done2)
			answers[1], _ = r.Send(ctx2, net, in, 1, "copy 2")
		}()
		// Copy 2's answer ends the wait too: a mistake may answer it before
		// it gets where the story holds it (keys in memory answer 409 at
		// once, whatever the policy), and the story then says what it got
		// instead of waiting out the stage's bound.
		reached := make(chan struct{})
		go func() {
			defer close(reached)
			select {
			case <-copy2There: // nil: never
			case <-done2:
			case <-ctx.Done():
			}
		}()
		if err := await(ctx, reached, "copy 2 to reach copy 1's key or rows"); err != nil {
			return answers, err
		}
		free()
		if err := await(ctx, done1, "copy 1's answer"); err != nil {
			return answers, err
		}
		return answers, await(ctx, done2, "copy 2's answer")
	}

	// atClaim holds copy 1 right after it claimed the key, before its
	// transaction: the key is in progress while copy 2 arrives.
	atClaim := func(ctx context.Context, held chan<- struct{}, release <-chan struct{}) context.Context {
		return idem.WithHooks(ctx, idem.Hooks{AfterClaim: func(context.Context, idem.Claim) {
			close(held)
			select {
			case <-release:
			case <-time.After(stageTimeout):
			}
		}})
	}

	protected := func(policy idem.ConflictPolicy) func(ctx context.Context, r *Run) error {
		return func(ctx context.Context, r *Run) error {
			h := r.Handler(nil)
			h.Conflict = policy
			in := r.AdaTap("ada-double-tap")
			st := stage{hold1: atClaim}
			if policy == idem.Reject409 {
				r.Step("Ada taps Send twice; copy 2 arrives while copy 1 holds the key, still working")
				// Copy 2 is answered 409 at once; copy 1 carries on after.
				st.hold2 = func(ctx context.Context, _ <-chan struct{}) (context.Context, <-chan struct{}) {
					r.Server("copy 1 has claimed the key and is still working when copy 2 arrives")
					return ctx, nil
				}
			} else {
				r.Step("Ada taps Send twice; copy 2 arrives while copy 1 holds the key, and waits")
				// Copy 2 finds the key in progress and starts to poll it
				// (its second claim attempt); copy 1 carries on then, and
				// copy 2's next look finds copy 1's stored answer.
				st.hold2 = func(ctx context.Context, done1 <-chan struct{}) (context.Context, <-chan struct{}) {
					waiting := make(chan struct{})
					looks := 0
					return idem.WithHooks(ctx, idem.Hooks{BeforeClaim: func(context.Context) {
						looks++
						if looks < 2 {
							return
						}
						if looks == 2 {
							r.Server("copy 2 finds the key in progress and waits for its answer")
							close(waiting)
						}
						// Copy 1 has answered before copy 2 looks again.
						select {
						case <-done1:
						case <-time.After(stageTimeout):
						}
					}}), waiting
				}
			}
			answers, err := twice(ctx, r, h, in, st)
			if err != nil {
				return err
			}
			first, second := answers[0], answers[1]
			r.Lesson().Expect(first.Status == 201 && !first.Replayed, "copy 1 moves the money: 201")
			if policy == idem.Reject409 {
				r.Lesson().Expect(second.Status == 409 && second.Code() == idem.CodeInProgress,
					"copy 2 finds the key in progress: 409 request_in_progress, retry shortly")
			} else {
				r.Expect(second.Status == 201 && second.Replayed, "copy 2 waits for copy 1 and gets its answer, replayed")
			}
			later, err := r.Send(ctx, r.Network(h, nil), in, 2, "later")
			r.Lesson().Expect(err == nil && later.Status == 201 && later.Replayed, "a later retry gets the replay")
			r.Lesson().ExpectBalances(ctx, 5_000_000-r.Amount(), 500_000+r.Amount(), 2_000_000)
			r.Lesson().ExpectTransfers(ctx, 1)
			return nil
		}
	}

	Register(Scenario{
		Name:    "double-tap",
		Title:   "Two copies at the same moment",
		Lesson:  "Two copies at the same moment",
		Order:   OrderDoubleTap,
		Amount:  AdaPaysBola.AmountKobo,
		Summary: "two copies of one request at the same moment on a real connection pool: one transfer; the other copy is told 409, or waits for the replay",
		Explain: Explanation{
			Shows: "Ada's thumb lands on Send twice, and two identical requests reach the server a few " +
				"milliseconds apart, each on its own database connection. bank-sim stages the overlap: the " +
				"second copy arrives while the first is still working.",
			Breaks: "Without a key the server cannot tell the copies apart: both pass every check, both " +
				"commit, and one tap moves ₦20,000.",
			Defence: "The idempotency key's primary key (user_id, key) lets exactly one copy claim it. The " +
				"other finds the key in progress and is told 409 request_in_progress with Retry-After — or, " +
				"with the wait policy, polls until the first copy's answer is stored and replays it. Either " +
				"way the money moves once.",
			SQL: "INSERT INTO idempotency_keys\n" +
				"       (user_id, key, request_hash, status, lock_id, locked_until, created_at)\n" +
				"VALUES ($1, $2, $3, 'in_progress', $4,\n" +
				"        bank_now() + interval '30 seconds', bank_now())\n" +
				"ON CONFLICT (user_id, key) DO NOTHING;\n" +
				"-- one row inserted: this copy proceeds; none: it reads the key instead",
		},
		Phases: []Phase{{
			Title:   "without protection: a transaction, but no idempotency key",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				h := r.Handler(nil)
				h.NoKey = true
				r.Step("Ada taps Send twice; both copies reach the server at the same moment")
				// Copy 1 stops with both account rows locked; copy 2 queues
				// for the same rows; then copy 1 commits, and copy 2 after.
				st := stage{
					hold1: func(ctx context.Context, held chan<- struct{}, release <-chan struct{}) context.Context {
						var once sync.Once
						return bank.WithAfterChecks(ctx, func() {
							once.Do(func() {
								close(held)
								select {
								case <-release:
								case <-time.After(stageTimeout):
								}
							})
						})
					},
					hold2: func(ctx context.Context, done1 <-chan struct{}) (context.Context, <-chan struct{}) {
						queued := make(chan struct{})
						go func() {
							if waitForLockWaiters(ctx, r, 1) == nil {
								r.Server("copy 2 waits for the account rows copy 1 has locked")
								close(queued)
							}
						}()
						// Copy 2 commits only once copy 1 has been answered, so
						// the answers come in the same order on every run.
						return idem.WithHooks(ctx, idem.Hooks{BeforeCommit: func(context.Context) error {
							select {
							case <-done1:
							case <-time.After(stageTimeout):
							}
							return nil
						}}), queued
					},
				}
				answers, err := twice(ctx, r, h, r.AdaTap("ada-double-tap"), st)
				if err != nil {
					return err
				}
				r.Expect(answers[0].Status == 201 && answers[1].Status == 201, "both copies are answered 201")
				r.ExpectTransfers(ctx, 2)
				return nil
			},
		}, {
			Title: "with protection, conflict policy 409: the loser is told to retry",
			Run:   protected(idem.Reject409),
		}, {
			Title: "with protection, conflict policy wait: the loser waits for the winner's result",
			Run:   protected(idem.WaitForResult),
		}},
	})
}
