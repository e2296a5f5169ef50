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
	// transfers and completed keys (a transfer's or a refusal's), answered
	// before the new primary served, that did not survive, and keys whose
	// holder had returned by then that the new primary still holds in
	// progress (their intents' unresolved violations).
	Crossing []Violation `json:"crossing"`
	// Unknown, when the window is unknown, says why.
	Unknown string `json:"unknown,omitempty"`
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
	window := "unavailability unknown (" + r.Unknown + ")"
	if u := r.UnavailableNs(); u >= 0 {
		window = fmt.Sprintf("unavailable %s (last acknowledged at %s, first acknowledged after at %s)", ms(u), ms(r.LastAckNs), ms(r.FirstAckNs))
	}
	lost := "nothing acknowledged was lost across it"
	if n := len(r.Crossing); n > 0 {
		acks, keys, held := 0, 0, 0
		for _, v := range r.Crossing {
			switch v.Kind {
			case KindAckMissing:
				acks++
			case KindKeyLost:
				keys++
			default:
				held++
			}
		}
		lost = fmt.Sprintf("lost across it: %s, %s", plural(acks, "acknowledged transfer", "acknowledged transfers"), plural(keys, "completed key", "completed keys"))
		if held > 0 {
			lost += ", " + plural(held, "key left in progress", "keys left in progress")
		}
	}
	return fmt.Sprintf("%s → %s, %s; old primary last answered at %s, new one first at %s; %s; %s",
		from, to, who, ms(r.LastSeenNs), ms(r.SeenNs), window, lost)
}

// primaryChanges measures each of h's primary changes against the
// history and the checker's violations.
func primaryChanges(h *History, vs []Violation) []PrimaryChangeResult {
	var out []PrimaryChangeResult
	stuck := make(map[string]bool, len(h.StuckKeys))
	for _, k := range h.StuckKeys {
		stuck[k] = true
	}
	stuckIntents := map[int]bool{} // the intents that sent a key still in progress at the end
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			if stuck[fmt.Sprintf("%d/%s", in.UserID, a.Key)] {
				stuckIntents[in.Index] = true
			}
		}
	}
	for _, pc := range h.PrimaryChanges {
		r := PrimaryChangeResult{PrimaryChange: pc, LastAckNs: -1, FirstAckNs: -1, Crossing: []Violation{}}
		// Each intent's first acknowledgement (a transfer), first final
		// answer (a transfer or a refusal: its key then completed), and
		// first return of any kind (its key no longer held by it).
		ackedAt, answeredAt, returnedAt := map[int]int64{}, map[int]int64{}, map[int]int64{}
		first := func(m map[int]int64, i int, t int64) {
			if old, ok := m[i]; !ok || t < old {
				m[i] = t
			}
		}
		sentAfter := 0 // attempts sent once the old primary was lost
		for _, in := range h.Intents {
			for _, a := range in.Attempts {
				if a.Lookup {
					continue
				}
				if a.StartNs >= pc.LostNs {
					sentAfter++
				}
				first(returnedAt, in.Index, a.EndNs)
				if a.Replayed || (a.Seen != SeenOK && a.Seen != SeenRejected) {
					continue
				}
				first(answeredAt, in.Index, a.EndNs)
				if a.Seen != SeenOK {
					continue
				}
				first(ackedAt, in.Index, a.EndNs)
				if a.EndNs <= pc.LostNs && a.EndNs > r.LastAckNs {
					r.LastAckNs = a.EndNs
				}
				if a.StartNs >= pc.LostNs && (r.FirstAckNs < 0 || a.EndNs < r.FirstAckNs) {
					r.FirstAckNs = a.EndNs
				}
			}
		}
		switch {
		case r.LastAckNs < 0:
			r.Unknown = "no transfer was acknowledged before the old primary was lost"
		case r.FirstAckNs >= 0:
		case sentAfter == 0:
			r.Unknown = "the workload had ended before the old primary was lost: no transfer was sent after it"
		default:
			r.Unknown = fmt.Sprintf("the new primary acknowledged none of the %s sent after the old one was lost", plural(sentAfter, "attempt", "attempts"))
		}
		for _, v := range vs {
			var at map[int]int64
			switch v.Kind {
			case KindAckMissing:
				at = ackedAt
			case KindKeyLost:
				at = answeredAt // a stored refusal's key is lost as a 201's is
			case KindUnresolved:
				// Only an intent whose key is still in progress at the
				// end: its holder came back, the new primary still says in
				// progress. (key-abandoned, before healing, is not judged
				// across a change: lock expiry is the defence.)
				if !stuckIntents[v.Intent] {
					continue
				}
				at = returnedAt
			default:
				continue
			}
			if t, ok := at[v.Intent]; ok && t <= pc.SeenNs {
				r.Crossing = append(r.Crossing, v)
			}
		}
		out = append(out, r)
	}
	return out
}
