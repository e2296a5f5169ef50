package chaos_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// A key still in progress at the end is told once: by the key-lost
// violation of the intent whose attempt had a final answer with it, or the
// unresolved one of an intent that never had one, whose detail names the
// key; a key no such violation names (no intent sent it, or its intent
// settled with another key) is an unresolved violation of its own. The
// one-line mistakes each case catches: a checker that drops History.StuckKeys
// (b's and c's key unnamed, c and e unreported), that reports every stuck
// key again as unresolved (a: key-lost and unresolved), or that lets
// unresolved take over a key key-lost names when key-lost is switched off
// (a with key-lost off: the audit would lose key-lost's sole mistake).
func TestAKeyInProgressIsNamedOnce(t *testing.T) {
	t.Parallel()
	answered := "2/" + key(4) // intent-4's key, told 201
	cases := []struct {
		name   string
		spoil  func(h *chaos.History)
		off    []string
		kind   string // the one violation, or "" for none
		intent int
		names  []string // what its detail says
	}{
		{"answered", func(h *chaos.History) {
			h.CompletedKeys = slices.DeleteFunc(h.CompletedKeys, func(k string) bool { return k == answered })
			h.StuckKeys = []string{answered}
		}, nil, chaos.KindKeyLost, 4, []string{"key " + answered + " is still in progress, not completed"}},
		{"answered, key-lost off", func(h *chaos.History) {
			h.CompletedKeys = slices.DeleteFunc(h.CompletedKeys, func(k string) bool { return k == answered })
			h.StuckKeys = []string{answered}
		}, []string{chaos.KindKeyLost}, "", 0, nil},
		{"never answered", func(h *chaos.History) {
			// intent-3's one attempt timed out, and healing never settled it.
			in := &h.Intents[3]
			in.Outcome = chaos.SeenUnknown
			in.Attempts[0] = chaos.Attempt{N: 1, Phase: chaos.PhaseHeal, Key: in.Key, StartNs: 10, EndNs: 20, Error: "timed out", Seen: chaos.SeenUnknown}
			k := "2/" + in.Key
			h.CompletedKeys = slices.DeleteFunc(h.CompletedKeys, func(c string) bool { return c == k })
			h.StuckKeys = []string{k}
		}, nil, chaos.KindUnresolved, 3, []string{"intent-3 still has no final answer", "its key 2/" + key(3) + " is still in progress at the end"}},
		{"sent by no intent", func(h *chaos.History) { h.StuckKeys = []string{"1/" + key(99)} },
			nil, chaos.KindUnresolved, -1, []string{"key 1/" + key(99) + " is still in progress at the end, and no intent sent it"}},
		{"settled with another key", func(h *chaos.History) {
			// intent-4's first attempt went with a key of its own, timed
			// out, and the client settled with a new one.
			in := &h.Intents[4]
			first := chaos.Attempt{N: 1, Phase: chaos.PhaseFault, Key: "first-key", StartNs: 1, EndNs: 2, Error: "timed out", Seen: chaos.SeenUnknown}
			in.Attempts = append([]chaos.Attempt{first}, in.Attempts...)
			in.Attempts[1].N = 2
			h.StuckKeys = []string{"2/first-key"}
		}, nil, chaos.KindUnresolved, 4, []string{"key 2/first-key is still in progress at the end, and no attempt settled it", "had its final answer with key " + key(4)}},
		{"no key in progress", func(*chaos.History) {}, nil, "", 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := goodHistory()
			c.spoil(h)
			res := chaos.CheckWithout(h, c.off)
			if c.kind == "" {
				if len(res.Violations) != 0 {
					t.Fatalf("violations %+v, want none", res.Violations)
				}
				return
			}
			if len(res.Violations) != 1 || res.Violations[0].Kind != c.kind {
				t.Fatalf("violations %+v, want one %s", res.Violations, c.kind)
			}
			v := res.Violations[0]
			if v.Intent != c.intent {
				t.Errorf("intent %d, want %d", v.Intent, c.intent)
			}
			for _, want := range c.names {
				if !strings.Contains(v.Detail, want) {
					t.Errorf("detail %q lacks %q", v.Detail, want)
				}
			}
		})
	}
}

// Every key of the good history, left in progress at the end, answered and
// unanswered, is named by its intents' key-lost or unresolved violations
// and breaks no rule of its own: the fold of key-in-progress into those two
// rules loses nothing (chaos.AloneNote, before it, called the rule implied).
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
			senders := 0
			for i := range h.Intents {
				if fmt.Sprintf("%d/%s", h.Intents[i].UserID, h.Intents[i].Key) != k {
					continue
				}
				senders++
				if unknown {
					// Every intent that sent k never had a final answer.
					h.Intents[i].Outcome = chaos.SeenUnknown
					for a := range h.Intents[i].Attempts {
						h.Intents[i].Attempts[a] = chaos.Attempt{N: a + 1, Phase: chaos.PhaseFault, Key: h.Intents[i].Key, Error: "timed out", Seen: chaos.SeenUnknown}
					}
				}
			}
			kind, other := chaos.KindKeyLost, chaos.KindUnresolved
			if unknown {
				kind, other = other, kind
			}
			res := chaos.Check(h)
			if res.ByKind[kind] != senders || res.ByKind[other] != 0 {
				t.Errorf("%s in progress (unknown=%v): %d %s and %d %s violations, want %d and 0: %+v", k, unknown, res.ByKind[kind], kind, res.ByKind[other], other, senders, res.Violations)
			}
			for _, v := range res.Violations {
				if v.Kind == kind && !strings.Contains(v.Detail, k+" is still in progress") {
					t.Errorf("%s in progress (unknown=%v): %s does not name it: %s", k, unknown, kind, v.Detail)
				}
			}
		}
	}
}
