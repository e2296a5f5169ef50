package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// Once a claim has committed, its row locks are gone: only the lease keeps
// the next claim off its rows until it expires. Without the lease
// condition, a second dispatcher claims the rows the first still holds,
// and the side effects' check sees two holders at once.
func TestAClaimPassesOverRowsUnderAnotherLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		flaws   outbox.Flaws
		second  int
		overlap bool
	}{
		{"correct", outbox.Flaws{}, 0, false},
		{"claim-without-lease-check", outbox.Flaws{NoLeaseCheck: true}, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			pool := pgtest.NewBank(t, 4)
			addSMSRows(t, pool, 3)
			p := outbox.NewProvider(1)
			d1 := &outbox.Dispatcher{DB: pool, Name: "d1", SMS: p, Flaws: tc.flaws}
			d2 := &outbox.Dispatcher{DB: pool, Name: "d2", SMS: p, Flaws: tc.flaws}
			first, err := d1.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			second, err := d2.Claim(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Rows) != 3 || len(second.Rows) != tc.second {
				t.Fatalf("d1 claimed %d rows, then d2 %d, within d1's lease; want 3, then %d", len(first.Rows), len(second.Rows), tc.second)
			}
			checks, err := outbox.Check(ctx, pool, outbox.World{Leases: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range checks {
				if c.Name == outbox.InvOneClaim && c.OK == tc.overlap {
					t.Errorf("%s: %v (%s), want %v", c.Name, c.OK, c.Detail, !tc.overlap)
				}
			}
		})
	}
}
