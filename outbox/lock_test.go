package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/outbox"
)

// SET NX PX holds until the expiry; compare-and-delete releases only the
// holder's own lock; a plain DEL by a holder whose lock expired deletes the
// next holder's, and the next grant is recorded as two holders at once.
func TestLocksExpiryAndRelease(t *testing.T) {
	t.Parallel()
	c := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
	l := outbox.NewLocks(c.Now)
	a, ok := l.Acquire("k", "A", 30*time.Second)
	if !ok {
		t.Fatal("A could not take a free lock")
	}
	c.Advance(29 * time.Second)
	if _, ok := l.Acquire("k", "B", 30*time.Second); ok {
		t.Fatal("B took the lock while A's was valid")
	}
	c.Advance(2 * time.Second) // A paused past its expiry
	b, ok := l.Acquire("k", "B", 30*time.Second)
	if !ok {
		t.Fatal("B could not take an expired lock")
	}
	if l.Release(a, outbox.Flaws{}) {
		t.Error("A's compare-and-delete deleted B's lock")
	}
	if _, ok := l.Acquire("k", "C", 30*time.Second); ok {
		t.Error("C took the lock B holds, after A's release")
	}
	if o := l.Overlaps(); len(o) != 0 {
		t.Errorf("overlaps with correct releases: %v", o)
	}
	if st := l.Stats(); st != (outbox.LockStats{TakenAfterExpiry: 1, ReleaseRefused: 1}) {
		t.Errorf("stats %+v, want B's takeover after A's expiry and A's refused release", st)
	}

	// The mistake: A's plain DEL removes B's lock, and C gets it while B
	// still believes it holds it.
	l.Release(a, outbox.Flaws{LockReleaseWithoutToken: true})
	if _, ok := l.Acquire("k", "C", 30*time.Second); !ok {
		t.Fatal("after a plain DEL the lock should be free")
	}
	if o := l.Overlaps(); len(o) != 1 {
		t.Errorf("overlaps after the DEL: %v, want C over B", o)
	}
	if !l.Release(b, outbox.Flaws{LockReleaseWithoutToken: true}) {
		t.Error("a plain DEL always deletes")
	}
}

// Two servers take the lock at once: B's attempt comes while A's is on the
// wire (RoundTrip). SET NX is one command, so B finds A's lock and is
// refused; the lock-get-then-set mistake's GET and SET let B's GET in
// between, both find the key free, both set it, and both hold it.
func TestLocksTwoAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		flaws    outbox.Flaws
		bHolds   bool
		overlaps int
	}{
		{"SET NX", outbox.Flaws{}, false, 0},
		{"GET then SET", outbox.Flaws{LockGetThenSet: true}, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
			l := outbox.NewLocks(c.Now)
			ctx := context.Background()
			var bHolds, bTried bool
			b := func() {
				bTried = true
				_, bHolds = l.AcquireWith(ctx, "k", "B", 30*time.Second, tc.flaws)
			}
			l.RoundTrip = func(context.Context) {
				l.RoundTrip = nil // B's own acquisition goes straight through
				b()
			}
			if _, ok := l.AcquireWith(ctx, "k", "A", 30*time.Second, tc.flaws); !ok {
				t.Fatal("A could not take a free lock")
			}
			if !bTried { // SET NX: no gap to come in by, B comes right after
				b()
			}
			if bHolds != tc.bHolds {
				t.Errorf("B holds the lock too: %v, want %v", bHolds, tc.bHolds)
			}
			if o := l.Overlaps(); len(o) != tc.overlaps {
				t.Errorf("overlaps %v, want %d", o, tc.overlaps)
			}
		})
	}
}
