package chaos

import (
	"testing"

	"github.com/banksim/bank-sim/probe"
)

// A target run's keyless and reordered intents are drawn among those whose
// keys nobody else sends: never a block's head (its follower sends its key
// again, or its overdraw is retried after a payment), never the follower.
// A reordered head would have its follower's reuse judged against a body
// the target never saw first; a keyless follower would send no key to
// reuse. Each full block has exactly one of each, on two intents.
func TestTargetShapesAvoidHeadsAndFollowers(t *testing.T) {
	users := []probe.User{{Name: "ada", Account: "a1"}, {Name: "bola", Account: "b2"}, {Name: "chidi", Account: "c3"}}
	const intents = 8 * headBlock
	for seed := uint64(1); seed <= 64; seed++ {
		c := Config{Seed: seed, Intents: intents, Target: &Target{URLs: []string{"http://127.0.0.1:1"}, Users: users}}.WithDefaults()
		l := c.layout()
		heads := 0
		keyless := map[int]int{}
		reordered := map[int]int{}
		for i := range intents {
			p := c.intentIn(l, i)
			head, follower := c.head(l, i), p.Follower
			if head {
				heads++
			}
			if p.Keyless {
				keyless[i/headBlock]++
			}
			if p.Reorder {
				reordered[i/headBlock]++
			}
			if (p.Keyless || p.Reorder) && (head || follower) {
				t.Fatalf("seed %d intent %d: keyless %v, reordered %v, and a head %v or a follower %v", seed, i, p.Keyless, p.Reorder, head, follower)
			}
			if p.Keyless && p.Reorder {
				t.Fatalf("seed %d intent %d is both keyless and reordered", seed, i)
			}
			if p.Reorder && !p.Repeat {
				t.Fatalf("seed %d intent %d is reordered but never retried: its reordering is never sent", seed, i)
			}
		}
		if heads == 0 {
			t.Fatalf("seed %d: no head in %d intents: the test proves nothing", seed, intents)
		}
		for b := range intents / headBlock {
			if keyless[b] != 1 || reordered[b] != 1 {
				t.Fatalf("seed %d block %d: %d keyless and %d reordered intents, want one of each", seed, b, keyless[b], reordered[b])
			}
		}
	}
}
