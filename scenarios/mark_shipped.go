package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	story := func(ctx context.Context, r *Run, w *World) error {
		if _, err := r.DB.Exec(ctx, "INSERT INTO orders (id, status) VALUES (1, 'paid'), (2, 'cancelled'), (4, 'paid')"); err != nil {
			return fmt.Errorf("seed the orders: %w", err)
		}
		r.Step("orders: 1 paid, 2 cancelled, 3 missing, 4 paid")
		ship := &outbox.Shipping{DB: r.DB, Flaws: w.Flaws}
		r.Step("the lesson's ship.js: markShipped(1), markShipped(1), markShipped(2), markShipped(3)")
		for _, call := range []struct {
			id   int
			want string
		}{{1, "shipped"}, {1, "already shipped (ok)"}, {2, "error: order is cancelled"}, {3, "error: order is missing"}} {
			got, err := ship.MarkShipped(ctx, call.id)
			if err != nil {
				return err
			}
			r.Server("%s", got)
			r.Expect(got == call.want, "markShipped(%d) prints %q", call.id, call.want)
		}

		r.Step("the courier app's request to ship order 4 arrives twice at the same moment")
		// Both copies read before either writes: a barrier where the
		// read-then-write mistake pauses (the correct code has no such
		// point: its one statement is the read and the write).
		var arrived sync.WaitGroup
		arrived.Add(2)
		allRead := make(chan struct{})
		go func() { arrived.Wait(); close(allRead) }()
		ship.AfterRead = func() {
			arrived.Done()
			select {
			case <-allRead:
			case <-time.After(5 * time.Second):
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
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		slices.Sort(answers)
		r.Server("the two copies answered: %s", strings.Join(answers, ", "))
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
		return nil
	}

	Register(Scenario{
		Name:    "mark-shipped",
		Summary: "the lesson's practice: markShipped made naturally idempotent with a conditional UPDATE … RETURNING, under duplicated and concurrent delivery",
		Phases: []Phase{{
			Title:   "without protection: the status read, checked in code, then 'shipped' written unconditionally",
			Control: true,
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World().With(outbox.Flaws{ShipReadThenWrite: true}))
			},
		}, {
			Title: "with protection: UPDATE … WHERE status = 'paid' RETURNING id, and a second query only to say why not",
			Run: func(ctx context.Context, r *Run) error {
				return story(ctx, r, r.World())
			},
		}},
	})
}
