package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/outbox"
)

// A consumer that dies with offsets uncommitted is followed by one that is
// delivered exactly the records after the committed offset, no fewer (that
// would lose events) and no more (the log is not a queue that redelivers
// everything).
func TestLogRedeliversWhatAnUncommittedOffsetImplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := outbox.NewLog(3)
	for i := range 5 {
		if _, err := l.Publish(ctx, "t", "account-1", fmt.Sprintf("e%d", i), int64(i), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	first := l.Join("g", "t")
	got := first.Poll(3)
	if ids(got) != "e0 e1 e2" {
		t.Fatalf("first poll %s, want e0 e1 e2", ids(got))
	}
	if err := first.Commit(got[1]); err != nil { // e0 and e1 done, e2 processed but not committed
		t.Fatal(err)
	}
	// first dies here.
	second := l.Join("g", "t")
	if again := second.Poll(10); ids(again) != "e2 e3 e4" {
		t.Errorf("after the crash the group is delivered %s, want e2 e3 e4", ids(again))
	}
	if err := first.Commit(got[2]); !errors.Is(err, outbox.ErrRebalanced) {
		t.Errorf("the dead session's late commit: %v, want ErrRebalanced", err)
	}
	if c := l.Committed("g", "t")[got[0].Partition]; c != 2 {
		t.Errorf("committed offset %d, want 2", c)
	}
	// Another group reads the whole topic from the start, on its own offsets.
	if other := l.Join("h", "t").Poll(10); len(other) != 5 {
		t.Errorf("another group is delivered %d records, want 5", len(other))
	}
}

// Records with one key land in one partition, in the order they were
// published, whatever else is published in between; an offset never moves
// back.
func TestLogKeepsOrderPerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := outbox.NewLog(4)
	for i := range 40 {
		key := fmt.Sprintf("account-%d", i%5)
		if _, err := l.Publish(ctx, "t", key, fmt.Sprintf("%s/%02d", key, i), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	s := l.Join("g", "t")
	last := map[string]string{}
	partition := map[string]int{}
	n := 0
	for recs := s.Poll(7); len(recs) > 0; recs = s.Poll(7) {
		for _, r := range recs {
			n++
			if p, seen := partition[r.Key]; seen && p != r.Partition {
				t.Errorf("%s in partitions %d and %d", r.Key, p, r.Partition)
			}
			partition[r.Key] = r.Partition
			if r.ID <= last[r.Key] {
				t.Errorf("%s delivered after %s", r.ID, last[r.Key])
			}
			last[r.Key] = r.ID
			if err := s.Commit(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n != 40 {
		t.Fatalf("delivered %d records, want 40", n)
	}
	before := l.Committed("g", "t")
	recs := l.Records("t")
	if err := s.Commit(recs[0]); err != nil {
		t.Fatal(err)
	}
	if after := l.Committed("g", "t"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("committing an old record moved the offsets back: %v → %v", before, after)
	}
	l.SetDown(true)
	if _, err := l.Publish(ctx, "t", "k", "x", 0, nil); !errors.Is(err, outbox.ErrLogDown) {
		t.Errorf("publish to a log that is down: %v", err)
	}
}

func ids(recs []outbox.Record) string {
	s := ""
	for i, r := range recs {
		if i > 0 {
			s += " "
		}
		s += r.ID
	}
	return s
}
