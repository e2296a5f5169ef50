package chaos_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// Every n-th seed of the whole list goes over HTTP, the n-th first: a
// function of the list alone, so that every shard of a campaign agrees.
func TestHTTPSeedsAreEveryNthOfTheList(t *testing.T) {
	t.Parallel()
	seeds := []uint64{11, 3, 7, 20, 5, 9, 14, 1, 2}
	for _, c := range []struct {
		n    int
		want []uint64
	}{
		{0, nil},
		{1, seeds},
		{4, []uint64{20, 1}},
		{3, []uint64{7, 9, 2}},
		{10, nil},
	} {
		got := chaos.HTTPSeeds(seeds, c.n)
		var in []uint64
		for _, s := range seeds {
			if got[s] {
				in = append(in, s)
			}
		}
		if len(got) != len(c.want) || !reflect.DeepEqual(in, c.want) && len(c.want) > 0 {
			t.Errorf("every %d of %v: %v over HTTP, want %v", c.n, seeds, in, c.want)
		}
	}
}

// Issue 30, item 3: a campaign whose second seed goes over HTTP catches a
// mistake only the HTTP layer has — api's ReencodedReplays, a replay
// decoded and encoded again, its members in another order — which the
// seed run in process cannot see (it never meets api/), and passes the
// correct handler. The HTTP seed says so, with no steps and no history
// hash: a free run repeats its intents and faults, not its history. It
// catches the campaign that runs every seed in process (which misses the
// mistake), and the one that hashes its free runs.
func TestCampaignOverHTTPCatchesWhatOnlyHTTPHas(t *testing.T) {
	t.Parallel()
	seeds := []uint64{42, 43}
	opts := chaos.CampaignOptions{Parallel: 2, HTTP: chaos.HTTPSeeds(seeds, 2)}
	flawed := mistakes.Bug{Name: "reencoded-replays", API: api.Flaws{ReencodedReplays: true}}
	for _, bug := range []*mistakes.Bug{nil, &flawed} {
		name := "the correct handler"
		if bug != nil {
			name = bug.Name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute, errors.New("the campaign did not finish within 3 minutes"))
			defer cancel()
			// 200 intents: the mistake shows only when an intent
			// answered 201 is answered again (sent once more after its
			// final answer, 5% of intents, or after the cleanup job),
			// and which intents a free run answers 201 is the
			// interleaving's. At 50 intents seed 43 met none once in
			// five runs under load.
			cfg := chaos.Config{Clients: 8, Intents: 200, Bug: bug}
			results := chaos.Campaign(ctx, pgtest.Banks(t), cfg, seeds, opts)
			if len(results) != 2 {
				t.Fatalf("%d results for 2 seeds", len(results))
			}
			inProcess, overHTTP := results[0], results[1]
			for _, r := range results {
				t.Logf("seed %d (http %v): %s, %d steps, hash %.12s, first %+v, error %q", r.Seed, r.HTTP, r.Verdict, r.Steps, r.Hash, r.First, r.Error)
				if r.Error != "" {
					t.Fatalf("seed %d could not run: %s", r.Seed, r.Error)
				}
			}
			if inProcess.HTTP || inProcess.Steps == 0 || inProcess.Hash == "" {
				t.Errorf("seed 42 (the first of two, every 2nd over HTTP): http %v, %d steps, hash %q; want in process, deterministic, with steps and a hash",
					inProcess.HTTP, inProcess.Steps, inProcess.Hash)
			}
			if !overHTTP.HTTP || overHTTP.Steps != 0 || overHTTP.Hash != "" {
				t.Errorf("seed 43 (the 2nd): http %v, %d steps, hash %q; want over HTTP, with no steps and no hash (a free run's history does not repeat)",
					overHTTP.HTTP, overHTTP.Steps, overHTTP.Hash)
			}
			if inProcess.Verdict == chaos.Invalid {
				t.Errorf("seed 42 in process: %s %s; want no rule broken (%s)", inProcess.First.Kind, inProcess.First.Detail, name)
			}
			if bug == nil {
				if overHTTP.Verdict == chaos.Invalid {
					t.Errorf("seed 43 over HTTP, the correct handler: %s %s", overHTTP.First.Kind, overHTTP.First.Detail)
				}
				return
			}
			if overHTTP.Verdict != chaos.Invalid || overHTTP.First.Kind != chaos.KindReplay {
				t.Fatalf("seed 43 over HTTP with %s: %s, want %s %s: the campaign's HTTP seed went unnoticed", name, overHTTP.Verdict, chaos.Invalid, chaos.KindReplay)
			}
			if first := chaos.FirstFailing(results); first == nil || first.Seed != 43 {
				t.Errorf("the first failing seed: %+v, want 43", first)
			}
		})
	}
}
