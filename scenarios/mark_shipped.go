package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/outbox"
)

// InvCourierOnce is mark-shipped's own invariant: each "shipped" answer
// hands the parcel to the courier.
const InvCourierOnce = "every shipped order handed to the courier once"

// The lesson's practice exercise: markShipped made naturally idempotent
// with a conditional UPDATE … RETURNING and no key table. The lesson's four
// calls print its four lines; then the courier app delivers "ship order 4"
// twice at the same moment (a duplicated request), and each "shipped" answer
// hands the parcel to the courier. Checked in Go on a status read before an
// unconditional write, both copies read 'paid' and both answer "shipped".
func init() {
	story := func(ctx context.Context, r *Run, w *World) (copies []string, err error) {
		if _, err := r.DB.Exec(ctx, "INSERT INTO orders (id, status) VALUES (1, 'paid'), (2, 'cancelled'), (4, 'paid')"); err != nil {
			return nil, fmt.Errorf("seed the orders: %w", err)
		}
		ship := &outbox.Shipping{DB: r.DB, Flaws: w.Flaws}
		r.Step("orders 1 and 4 paid, 2 cancelled, 3 missing; the lesson's ship.js calls:")
		for _, call := range []struct {
			id   int
			want string
		}{{1, "shipped"}, {1, "already shipped (ok)"}, {2, "error: order is cancelled"}, {3, "error: order is missing"}} {
			got, err := ship.MarkShipped(ctx, call.id)
			if err != nil {
				return nil, err
			}
			r.Answered("ship.js", "database", fmt.Sprintf("markShipped(%d)", call.id), got)
			r.Lesson().Expect(got == call.want, "markShipped(%d) prints %q", call.id, call.want)
		}

		r.Step("the courier app's request to ship order 4 arrives twice at the same moment")
		// Both copies read before either writes: a barrier where the
		// read-then-write mistake pauses (the correct code has no such
		// point: its one statement is the read and the write).
		// The second read opens it; counted, not waited for, so that the
		// correct code (which never reads) leaves no goroutine behind.
		var reads atomic.Int32
		allRead := make(chan struct{})
		var stalled atomic.Bool
		ship.AfterRead = func() {
			if reads.Add(1) == 2 {
				close(allRead)
			}
			select {
			case <-allRead:
			case <-time.After(30 * time.Second):
				stalled.Store(true)
			}
		}
		answers := make([]string, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i], errs[i] = ship.MarkShipped(ctx, 4)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if stalled.Load() {
			return nil, errors.New("waited 30s for both copies of \"ship order 4\" to read the order")
		}
		// Which copy got which answer is the scheduler's choice: the story
		// tells "shipped" first.
		slices.Sort(answers)
		slices.Reverse(answers)
		r.Answered("courier app", "database", "one copy", answers[0])
		r.Answered("courier app", "database", "the other", answers[1])
		courier := map[int]int{1: 1} // order 1 went to the courier on its "shipped" above
		for _, a := range answers {
			if a == outbox.Shipped {
				courier[4]++
			}
		}
		r.Expect(courier[4] >= 1, "order 4 is shipped")
		var bad []string
		for _, id := range []int{1, 4} {
			if courier[id] != 1 {
				bad = append(bad, fmt.Sprintf("order %d handed over %d times", id, courier[id]))
			}
		}
		if len(bad) == 0 {
			r.Invariant(InvCourierOnce, true, "orders 1 and 4 once each")
		} else {
			r.Invariant(InvCourierOnce, false, strings.Join(bad, "; "))
		}
		return answers, nil
	}

	Register(Scenario{
		Name:    "mark-shipped",
		Title:   "Naturally idempotent: mark an order shipped",
		Lesson:  "Practice: Naturally idempotent: mark an order shipped",
		Order:   OrderPractice,
		Summary: "the lesson's practice: markShipped made naturally idempotent with a conditional UPDATE … RETURNING, under duplicated and concurrent delivery",
		Explain: Explanation{
			Shows: "The lesson's exercise: markShipped(orderId) on a table orders (id, status), called " +
				"twice for order 1, then for a cancelled and a missing order, as the lesson's ship.js " +
				"does. Then the courier app's request to ship order 4 arrives twice at the same moment, " +
				"and every \"shipped\" hands a parcel to the courier.",
			Breaks: "Checked in code, the status is read first and 'shipped' written after: called one " +
				"at a time this prints the lesson's four lines, but two calls at once both read 'paid', " +
				"both write, and both answer \"shipped\": the parcel goes to the courier twice.",
			Defence: "No key table is needed, because the target state says everything: make the change " +
				"conditional on the current state. The UPDATE's RETURNING tells whether this call made " +
				"the change; only when it did not does a second query find out why (already shipped is " +
				"a success, cancelled or missing an error). Of two calls at once, PostgreSQL's row lock " +
				"lets exactly one change the row.",
			SQL: "UPDATE orders SET status = 'shipped'\n" +
				" WHERE id = $1 AND status = 'paid'\n" +
				"RETURNING id;\n" +
				"-- one row: \"shipped\"; none: ask why\n" +
				"SELECT status FROM orders WHERE id = $1;\n" +
				"-- 'shipped': \"already shipped (ok)\"; else \"error: order is …\"",
		},
		Phases: []Phase{{
			Title:   "without protection: the status read, checked in code, then 'shipped' written unconditionally",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				_, err := story(ctx, r, r.World().With(outbox.Flaws{ShipReadThenWrite: true}))
				return err
			},
		}, {
			Title: "with protection: UPDATE … WHERE status = 'paid' RETURNING id, and a second query only to say why not",
			Run: func(ctx context.Context, r *Run) error {
				copies, err := story(ctx, r, r.World())
				r.Expect(slices.Equal(copies, []string{outbox.Shipped, outbox.AlreadyShipped}),
					"of the two copies one ships the order, the other is told %q", outbox.AlreadyShipped)
				return err
			},
		}},
	})
}
