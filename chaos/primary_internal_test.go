package chaos

import (
	"strings"
	"testing"
)

// A change of primary is measured against the history: the window runs
// from the last acknowledgement before the old primary was lost to the
// first one sent after, and the losses that cross it are those of intents
// acknowledged before the new primary served; a loss acknowledged after
// it, or another kind of violation, is not the failover's.
func TestPrimaryChangeWindowAndWhatCrossesIt(t *testing.T) {
	ms := int64(1_000_000)
	ok := func(start, end int64) Attempt {
		return Attempt{StartNs: start * ms, EndNs: end * ms, Status: 201, Seen: SeenOK}
	}
	h := &History{
		Intents: []Intent{
			{Index: 0, Attempts: []Attempt{ok(10, 20)}},
			{Index: 1, Attempts: []Attempt{ok(90, 100)}},                                                           // the last ack before
			{Index: 2, Attempts: []Attempt{{StartNs: 105 * ms, EndNs: 400 * ms, Seen: SeenUnknown}, ok(500, 520)}}, // sent before, acked after
			{Index: 3, Attempts: []Attempt{ok(300, 350)}},                                                          // the first ack sent after
			{Index: 4, Attempts: []Attempt{ok(600, 610), {StartNs: 700 * ms, EndNs: 705 * ms, Status: 201, Replayed: true, Seen: SeenOK}}},
		},
		PrimaryChanges: []PrimaryChange{{Cause: CauseUnannounced, From: "h1:5432", To: "h2:5432", FromTimeline: 3, ToTimeline: 4,
			LastSeenNs: 95 * ms, LostNs: 110 * ms, SeenNs: 330 * ms}},
	}
	vs := []Violation{
		{Kind: KindAckMissing, Intent: 1},
		{Kind: KindKeyLost, Intent: 0},
		{Kind: KindAckMissing, Intent: 4}, // acknowledged after the new primary served
		{Kind: KindReplay, Intent: 1},
	}
	got := primaryChanges(h, vs)
	if len(got) != 1 {
		t.Fatalf("%d results, want 1", len(got))
	}
	r := got[0]
	if r.LastAckNs != 100*ms || r.FirstAckNs != 350*ms || r.UnavailableNs() != 250*ms {
		t.Errorf("window %d → %d (%d), want 100ms → 350ms (250ms)", r.LastAckNs, r.FirstAckNs, r.UnavailableNs())
	}
	if len(r.Crossing) != 2 || r.Crossing[0].Intent != 1 || r.Crossing[1].Intent != 0 {
		t.Errorf("crossing %+v, want intent 1's acknowledged-missing and intent 0's key-lost", r.Crossing)
	}
	line := r.Line()
	for _, want := range []string{"h1:5432 (timeline 3) → h2:5432 (timeline 4)", "nobody told bank-sim", "unavailable 250ms", "1 acknowledged transfer, 1 completed key"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}
