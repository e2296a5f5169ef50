package chaos

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
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
			{Index: 5, Attempts: []Attempt{{StartNs: 30 * ms, EndNs: 40 * ms, Status: 422, Seen: SeenRejected}}},                        // refused before
			{Index: 6, UserID: 1, Attempts: []Attempt{{StartNs: 50 * ms, EndNs: 60 * ms, Key: "k6", Status: 500, Seen: SeenUnknown}}},   // its holder back before
			{Index: 7, Attempts: []Attempt{{StartNs: 400 * ms, EndNs: 410 * ms, Status: 422, Seen: SeenRejected}}},                      // refused after
			{Index: 8, UserID: 1, Attempts: []Attempt{{StartNs: 340 * ms, EndNs: 345 * ms, Key: "k8", Status: 500, Seen: SeenUnknown}}}, // back after
			{Index: 9, UserID: 1, Attempts: []Attempt{{StartNs: 50 * ms, EndNs: 60 * ms, Key: "k9", Status: 500, Seen: SeenUnknown}}},   // back before, its key not in progress
		},
		StuckKeys: []string{"1/k6", "1/k8"},
		PrimaryChanges: []PrimaryChange{{Cause: CauseUnannounced, From: "h1:5432", To: "h2:5432", FromTimeline: 3, ToTimeline: 4,
			LastSeenNs: 95 * ms, LostNs: 110 * ms, SeenNs: 330 * ms}},
	}
	vs := []Violation{
		{Kind: KindAckMissing, Intent: 1},
		{Kind: KindKeyLost, Intent: 0},
		{Kind: KindAckMissing, Intent: 4}, // acknowledged after the new primary served
		{Kind: KindReplay, Intent: 1},
		{Kind: KindKeyLost, Intent: 5},     // a stored refusal lost across it
		{Kind: KindUnresolved, Intent: 6},  // the completion lost, the claim kept
		{Kind: KindKeyLost, Intent: 7},     // refused after the new primary served
		{Kind: KindUnresolved, Intent: 8},  // back after
		{Kind: KindKeyLost, Intent: 2},     // its 201 came after the new primary served
		{Kind: KindUnresolved, Intent: 9},  // unsettled, but no key of its is held
		{Kind: KindUnresolved, Intent: -1}, // a key in progress no intent sent
	}
	got := primaryChanges(h, vs)
	if len(got) != 1 {
		t.Fatalf("%d results, want 1", len(got))
	}
	r := got[0]
	if r.LastAckNs != 100*ms || r.FirstAckNs != 350*ms || r.UnavailableNs() != 250*ms {
		t.Errorf("window %d → %d (%d), want 100ms → 350ms (250ms)", r.LastAckNs, r.FirstAckNs, r.UnavailableNs())
	}
	var crossing []string
	for _, v := range r.Crossing {
		crossing = append(crossing, fmt.Sprintf("%s %d", v.Kind, v.Intent))
	}
	want := []string{KindAckMissing + " 1", KindKeyLost + " 0", KindKeyLost + " 5", KindUnresolved + " 6"}
	if !slices.Equal(crossing, want) {
		t.Errorf("crossing %q, want %q", crossing, want)
	}
	line := r.Line()
	for _, want := range []string{"h1:5432 (timeline 3) → h2:5432 (timeline 4)", "nobody told bank-sim", "unavailable 250ms", "1 acknowledged transfer, 2 completed keys, 1 key left in progress"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
}

// A failover command run by time (a run of a duration) is said to run at
// its time, not "as intent -1 started".
func TestFailoverCommandLineSaysWhenItRan(t *testing.T) {
	ms := int64(time.Millisecond)
	byIntent := FailoverCommand{Command: "x", AfterIntent: 3, StartNs: 1000 * ms, EndNs: 3000 * ms}
	byTime := FailoverCommand{Command: "x", AfterIntent: -1, StartNs: 1500 * ms, EndNs: 2000 * ms, ExitCode: 2}
	if got, want := byIntent.Line(), `"x" as intent 3 started, at 1s, for 2s: exit 0`; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := byTime.Line(), `"x" at 1.5s, for 500ms: exit 2`; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// A window with an unknown end says why: nothing acknowledged before the
// loss, a workload that had ended before it, or sends the new primary
// never acknowledged.
func TestPrimaryChangeSaysWhyItsWindowIsUnknown(t *testing.T) {
	ms := int64(time.Millisecond)
	ok := func(start, end int64) Attempt {
		return Attempt{StartNs: start * ms, EndNs: end * ms, Status: 201, Seen: SeenOK}
	}
	failed := func(start, end int64) Attempt {
		return Attempt{StartNs: start * ms, EndNs: end * ms, Status: 500, Seen: SeenUnknown}
	}
	change := []PrimaryChange{{From: "h1:5432", To: "h2:5432", LastSeenNs: 95 * ms, LostNs: 110 * ms, SeenNs: 330 * ms}}
	for _, c := range []struct {
		name     string
		attempts []Attempt
		want     string
	}{
		{"ended before", []Attempt{ok(10, 20), ok(50, 90)}, "unavailability unknown (the workload had ended before the old primary was lost: no transfer was sent after it)"},
		{"none acknowledged after", []Attempt{ok(10, 20), failed(200, 210), failed(400, 410)}, "unavailability unknown (the new primary acknowledged none of the 2 attempts sent after the old one was lost)"},
		{"none before", []Attempt{failed(10, 20), ok(400, 410)}, "unavailability unknown (no transfer was acknowledged before the old primary was lost)"},
		{"known", []Attempt{ok(10, 20), ok(400, 410)}, "unavailable 390ms"},
	} {
		h := &History{PrimaryChanges: change}
		for i, a := range c.attempts {
			h.Intents = append(h.Intents, Intent{Index: i, Attempts: []Attempt{a}})
		}
		r := primaryChanges(h, nil)[0]
		if line := r.Line(); !strings.Contains(line, c.want) {
			t.Errorf("%s: %q lacks %q", c.name, line, c.want)
		}
		if (r.Unknown == "") != (r.UnavailableNs() >= 0) {
			t.Errorf("%s: Unknown %q with a window of %d", c.name, r.Unknown, r.UnavailableNs())
		}
	}
}
