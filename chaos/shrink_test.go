package chaos_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

func TestDdminFindsTheFailingPair(t *testing.T) {
	t.Parallel()
	units := make([]int, 50)
	for i := range units {
		units[i] = i
	}
	tests := 0
	got := chaos.Ddmin(units, func(s []int) bool {
		tests++
		has := map[int]bool{}
		for _, u := range s {
			has[u] = true
		}
		return has[7] && has[41]
	})
	if !reflect.DeepEqual(got, []int{7, 41}) {
		t.Fatalf("got %v, want [7 41]", got)
	}
	if tests > 120 {
		t.Errorf("%d tests for 50 units", tests)
	}
}

func TestParseSeeds(t *testing.T) {
	t.Parallel()
	got, err := chaos.ParseSeeds("1-3, 7,10-11")
	if err != nil || !reflect.DeepEqual(got, []uint64{1, 2, 3, 7, 10, 11}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "5-1", "1-3,2", "1-20000", "-4"} {
		if _, err := chaos.ParseSeeds(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Seeds are strings in JSON, so that JavaScript and jq do not round them;
// histories saved with numbers still load.
func TestSeedsAreStringsInJSON(t *testing.T) {
	t.Parallel()
	const big = 18300176486368320001 // above 2^53: a float64 cannot hold it
	h := &chaos.History{Seed: big, Config: chaos.Config{Seed: big}}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"seed":"18300176486368320001"`) || strings.Contains(string(b), `"seed":18300176486368320001`) {
		t.Fatalf("the seed is not a string: %s", b)
	}
	var back chaos.History
	if err := json.Unmarshal(b, &back); err != nil || back.Seed != big || back.Config.Seed != big {
		t.Fatalf("read back %d/%d, %v", back.Seed, back.Config.Seed, err)
	}
	var old chaos.History
	if err := json.Unmarshal([]byte(`{"seed":42,"config":{"seed":42}}`), &old); err != nil || old.Seed != 42 || old.Config.Seed != 42 {
		t.Fatalf("an old history's numeric seed: %d/%d, %v", old.Seed, old.Config.Seed, err)
	}
}

// A campaign runs each seed as the deterministic run of that seed alone:
// the same hash as a run of its own, two seeds at once or not; a mistake's
// seeds are INVALID, the first of them in the order given is FirstFailing,
// and it keeps its history to be shrunk.
func TestCampaignSeedsAreTheirOwnRuns(t *testing.T) {
	t.Parallel()
	b, _ := mistakes.Lookup("read-compare-write")
	// Twenty intents: read-compare-write breaks a rule in both seeds
	// already, so the first failing one is the first given (3), not the
	// lowest.
	cfg := chaos.Config{Clients: 4, Intents: 20, Bug: &b}
	seeds := []uint64{3, 1}
	var done []uint64
	results := chaos.Campaign(context.Background(), pgtest.Banks(t), cfg, seeds,
		chaos.CampaignOptions{Parallel: 2, Done: func(r chaos.SeedResult, n, total int) {
			done = append(done, uint64(r.Seed))
			if total != len(seeds) || n != len(done) {
				t.Errorf("progress %d/%d after %d seeds", n, total, len(done))
			}
		}})
	if len(results) != len(seeds) || len(done) != len(seeds) {
		t.Fatalf("%d results, %d progress calls for %d seeds", len(results), len(done), len(seeds))
	}
	for i, r := range results {
		if uint64(r.Seed) != seeds[i] {
			t.Fatalf("result %d is seed %d, want %d (the order given)", i, r.Seed, seeds[i])
		}
		c := cfg
		c.Seed = seeds[i]
		h, _ := detRun(t, c)
		want, _ := h.Hash()
		if r.Hash != want {
			t.Errorf("seed %d: the campaign's hash %s, a run of its own %s", seeds[i], r.Hash, want)
		}
		if res := chaos.Check(h); r.Verdict != res.Verdict() {
			t.Errorf("seed %d: the campaign says %s, a run of its own %s", seeds[i], r.Verdict, res.Verdict())
		}
	}
	first := chaos.FirstFailing(results)
	if first == nil {
		t.Fatalf("read-compare-write broke no rule in seeds %v: %+v", seeds, results)
	}
	for _, r := range results {
		if r.Verdict == chaos.Invalid {
			if r.Seed != first.Seed {
				t.Fatalf("first failing: seed %d, but seed %d comes first", first.Seed, r.Seed)
			}
			break
		}
	}
	if first.History == nil || first.First == nil {
		t.Fatal("the first failing seed kept no history or violation to shrink")
	}
}

// Issue 30, kind 2: the shrinker never keeps a follower whose leader it
// dropped, nor one whose leader was dropped for want of its own leader: the
// follower would follow another intent, or none. What it keeps is a script
// that validates, each kept follower after the intent it followed.
func TestShrinkKeepsNoFollowerWithoutItsLeader(t *testing.T) {
	t.Parallel()
	intent := func(label string, follower bool) chaos.ScriptIntent {
		return chaos.ScriptIntent{Label: label, UserID: 1, Key: "k-" + label, Follower: follower, Attempts: []chaos.ScriptAttempt{{}}}
	}
	// a; b follows a; c follows b; d; e reuses d's key, as its follower.
	sc := &chaos.Script{Intents: []chaos.ScriptIntent{intent("a", false), intent("b", true), intent("c", true), intent("d", false), intent("e", true)}}
	sc.Intents[4].Reuse, sc.Intents[4].ReuseOf = chaos.ReuseAmount, 3
	cases := []struct {
		keep []int
		want string // the kept intents' keys' labels, in order
	}{
		{[]int{0, 1, 2, 3, 4}, "a b c d e"},
		{[]int{1, 2, 3}, "d"},        // b's leader dropped, and so c's
		{[]int{0, 2, 3, 4}, "a d e"}, // c's leader b dropped
		{[]int{0, 1, 4}, "a b"},      // e's leader d dropped
		{[]int{3, 4}, "d e"},
	}
	for _, tc := range cases {
		got := chaos.KeepIntents(sc, tc.keep)
		var keys []string
		for _, in := range got.Intents {
			keys = append(keys, strings.TrimPrefix(in.Key, "k-"))
		}
		if strings.Join(keys, " ") != tc.want {
			t.Errorf("keeping %v: kept %v, want %s", tc.keep, keys, tc.want)
			continue
		}
		if err := got.Validate(1); err != nil {
			t.Errorf("keeping %v: the script kept does not validate: %v", tc.keep, err)
		}
	}
}
