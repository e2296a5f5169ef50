package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/banksim/bank-sim/probe/judge"
)

// Stats is the summary of a run, computed from its history.
type Stats struct {
	Intents  int `json:"intents"`
	Attempts int `json:"attempts"`
	OK       int `json:"ok"`
	Rejected int `json:"rejected"`
	// Healed is how many intents ended the fault phase unknown; Resolved
	// how many of those healing settled.
	Healed           int            `json:"healed"`
	Resolved         int            `json:"resolved"`
	Unresolved       int            `json:"unresolved"`
	Replays          int            `json:"replays"`
	Conflicts        int            `json:"conflicts"` // 409 answers
	ServerErrors     int            `json:"serverErrors"`
	Takeovers        int            `json:"takeovers"`
	FencingRollbacks int            `json:"fencingRollbacks"`
	Fired            map[string]int `json:"fired"`
	Transfers        int            `json:"transfers"`
	Audits           int            `json:"audits"`
	Duration         time.Duration  `json:"durationNs"`
	// IntentsPerSecond is intents settled per second of the whole run.
	IntentsPerSecond float64 `json:"intentsPerSecond"`
	// Crashes are the kills of PostgreSQL (KillPostgres).
	Crashes []Crash `json:"crashes,omitempty"`
	// Causes group the server errors and refusals by status and what their
	// bodies say ("673 × 500 deadlock detected"), most frequent first: a
	// reader sees why, not only how many.
	Causes []CauseCount `json:"causes,omitempty"`
	// Keyless is how many requests a target run sent without their key
	// (Intent.Keyless), and KeylessRefused how many of those the target
	// refused, as it must (the others break no-key, or went unanswered).
	Keyless        int `json:"keyless,omitempty"`
	KeylessRefused int `json:"keylessRefused,omitempty"`
}

// CauseCount is how many answers had one cause (judge.Cause).
type CauseCount struct {
	Count int    `json:"count"`
	Cause string `json:"cause"`
}

// maxCauses bounds the causes a summary lists; the rest are summed in one
// last line.
const maxCauses = 10

// Summarize counts what happened in h.
func Summarize(h *History) Stats {
	s := Stats{Intents: len(h.Intents), Takeovers: h.Server[PathTakeover], FencingRollbacks: h.Server[PathFencing],
		Fired: h.Fired, Transfers: len(h.Final.Transfers), Audits: len(h.Audits), Duration: h.Duration,
		Crashes: h.Crashes}
	if t := h.Config.Target; t != nil {
		s.Transfers = len(t.ledger(h)) // the target's transfers, as its answers name them
	}
	causes := map[string]int{}
	for _, in := range h.Intents {
		s.Attempts += len(in.Attempts)
		switch in.Outcome {
		case SeenOK:
			s.OK++
		case SeenRejected:
			s.Rejected++
		default:
			s.Unresolved++
		}
		if in.Healed {
			s.Healed++
			if in.Outcome != SeenUnknown {
				s.Resolved++
			}
		}
		if a := in.Keyless; a != nil {
			s.Keyless++
			if h.Config.Target != nil && h.Config.Target.keylessRefused(&in) {
				s.KeylessRefused++
			}
			if a.Status >= 500 || a.Seen == SeenRejected {
				causes[judge.Cause(a.Status, a.Bytes())]++
			}
		}
		var replays []bool
		if t := h.Config.Target; t != nil {
			replays = t.replays(&in) // by transfer id, header or not
		}
		for k, a := range in.Attempts {
			switch {
			case a.Replayed && replays == nil, replays != nil && replays[k]:
				s.Replays++
			case a.Status == 409:
				s.Conflicts++
			case a.Status >= 500:
				s.ServerErrors++
			}
			if a.Status >= 500 || a.Seen == SeenRejected {
				causes[judge.Cause(a.Status, a.Bytes())]++
			}
		}
	}
	s.Causes = groupCauses(causes)
	if h.Duration == 0 && h.Wall > 0 {
		// A deterministic history keeps no time; the run that made it
		// measured its own.
		s.Duration = h.Wall
	}
	if s.Duration > 0 {
		s.IntentsPerSecond = float64(s.Intents) / s.Duration.Seconds()
	}
	return s
}

// groupCauses lists counts by cause, most frequent first (then by text, so
// that a seed prints the same list), at most maxCauses of them and a last
// line for the rest.
func groupCauses(counts map[string]int) []CauseCount {
	var out []CauseCount
	for c, n := range counts {
		out = append(out, CauseCount{Count: n, Cause: c})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Cause < out[j].Cause
	})
	if len(out) > maxCauses {
		rest := CauseCount{}
		for _, c := range out[maxCauses-1:] {
			rest.Count += c.Count
		}
		rest.Cause = fmt.Sprintf("%d other causes", len(out)-maxCauses+1)
		out = append(out[:maxCauses-1], rest)
	}
	return out
}
