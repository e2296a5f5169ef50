package chaos_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// key-in-progress is never alone on a key that an intent's attempts sent
// (chaos.AloneNote): each of the good history's keys left in progress at
// the end breaks key-lost too (every intent there had a final answer), and
// a key in progress whose intent never had one breaks unresolved too.
func TestAKeyInProgressIsLostOrUnresolved(t *testing.T) {
	t.Parallel()
	base := goodHistory()
	seen := map[string]bool{}
	for _, in := range base.Intents {
		k := fmt.Sprintf("%d/%s", in.UserID, in.Key)
		if seen[k] {
			continue
		}
		seen[k] = true
		for _, unknown := range []bool{false, true} {
			h := goodHistory()
			h.CompletedKeys = slices.DeleteFunc(h.CompletedKeys, func(c string) bool { return c == k })
			h.StuckKeys = []string{k}
			if unknown {
				// Every intent that sent k never had a final answer.
				for i := range h.Intents {
					if fmt.Sprintf("%d/%s", h.Intents[i].UserID, h.Intents[i].Key) != k {
						continue
					}
					h.Intents[i].Outcome = chaos.SeenUnknown
					for a := range h.Intents[i].Attempts {
						h.Intents[i].Attempts[a] = chaos.Attempt{N: a + 1, Phase: chaos.PhaseFault, Key: h.Intents[i].Key, Error: "timed out", Seen: chaos.SeenUnknown}
					}
				}
			}
			res := chaos.Check(h)
			if res.ByKind[chaos.KindStuckKey] != 1 {
				t.Errorf("%s in progress (unknown=%v): %d key-in-progress violations, want 1", k, unknown, res.ByKind[chaos.KindStuckKey])
			}
			backup := chaos.KindKeyLost
			if unknown {
				backup = chaos.KindUnresolved
			}
			if res.ByKind[backup] == 0 {
				t.Errorf("%s in progress (unknown=%v): key-in-progress alone, without %s: %v", k, unknown, backup, kinds(res))
			}
		}
	}
}
