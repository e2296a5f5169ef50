package chaos

import (
	"fmt"
	"time"
)

// PrimaryChangeResult is a PrimaryChange measured against the run: how
// long the bank was unavailable, and what the change cost.
type PrimaryChangeResult struct {
	PrimaryChange
	// LastAckNs is the end of the last attempt acknowledged (a first 201,
	// not a replay) before the old primary was lost; FirstAckNs the end of
	// the first acknowledged attempt sent after. -1 when there is none.
	LastAckNs  int64 `json:"lastAckNs"`
	FirstAckNs int64 `json:"firstAckNs"`
	// Crossing are the violations that cross the change: acknowledged
	// transfers and completed keys, acknowledged before the new primary
	// served, that did not survive.
	Crossing []Violation `json:"crossing"`
}

// UnavailableNs is the unavailability window's length, -1 when one of
// its ends is unknown.
func (r PrimaryChangeResult) UnavailableNs() int64 {
	if r.LastAckNs < 0 || r.FirstAckNs < 0 {
		return -1
	}
	return r.FirstAckNs - r.LastAckNs
}

// Line says it in one line, in the words of every report.
func (r PrimaryChangeResult) Line() string {
	ms := func(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }
	who := "nobody told bank-sim: it saw it"
	switch r.Cause {
	case CauseCommand:
		who = "after the run's --failover-cmd"
	case CauseExpected:
		who = "expected (--expect-failover)"
	}
	from, to := r.From, r.To
	if r.FromTimeline > 0 {
		from += fmt.Sprintf(" (timeline %d)", r.FromTimeline)
	}
	if r.ToTimeline > 0 {
		to += fmt.Sprintf(" (timeline %d)", r.ToTimeline)
	}
	window := "unavailability unknown (no acknowledged transfer on one side)"
	if u := r.UnavailableNs(); u >= 0 {
		window = fmt.Sprintf("unavailable %s (last acknowledged at %s, first acknowledged after at %s)", ms(u), ms(r.LastAckNs), ms(r.FirstAckNs))
	}
	lost := "nothing acknowledged was lost across it"
	if n := len(r.Crossing); n > 0 {
		acks, keys := 0, 0
		for _, v := range r.Crossing {
			if v.Kind == KindAckMissing {
				acks++
			} else {
				keys++
			}
		}
		lost = fmt.Sprintf("lost across it: %s, %s", plural(acks, "acknowledged transfer", "acknowledged transfers"), plural(keys, "completed key", "completed keys"))
	}
	return fmt.Sprintf("%s → %s, %s; old primary last answered at %s, new one first at %s; %s; %s",
		from, to, who, ms(r.LastSeenNs), ms(r.SeenNs), window, lost)
}

// primaryChanges measures each of h's primary changes against the
// history and the checker's violations.
func primaryChanges(h *History, vs []Violation) []PrimaryChangeResult {
	var out []PrimaryChangeResult
	for _, pc := range h.PrimaryChanges {
		r := PrimaryChangeResult{PrimaryChange: pc, LastAckNs: -1, FirstAckNs: -1, Crossing: []Violation{}}
		ackedAt := map[int]int64{} // intent → end of its first acknowledgement
		for _, in := range h.Intents {
			for _, a := range in.Attempts {
				if a.Seen != SeenOK || a.Replayed || a.Lookup {
					continue
				}
				if t, ok := ackedAt[in.Index]; !ok || a.EndNs < t {
					ackedAt[in.Index] = a.EndNs
				}
				if a.EndNs <= pc.LostNs && a.EndNs > r.LastAckNs {
					r.LastAckNs = a.EndNs
				}
				if a.StartNs >= pc.LostNs && (r.FirstAckNs < 0 || a.EndNs < r.FirstAckNs) {
					r.FirstAckNs = a.EndNs
				}
			}
		}
		for _, v := range vs {
			if v.Kind != KindAckMissing && v.Kind != KindKeyLost {
				continue
			}
			if t, ok := ackedAt[v.Intent]; ok && t <= pc.SeenNs {
				r.Crossing = append(r.Crossing, v)
			}
		}
		out = append(out, r)
	}
	return out
}
