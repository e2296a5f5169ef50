package chaos

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
)

// SeedResult is one seed of a campaign.
type SeedResult struct {
	Seed    Seed   `json:"seed"`
	Verdict string `json:"verdict"`
	Stats   Stats  `json:"stats"`
	// Faults is how many faults fired.
	Faults int `json:"faults"`
	// Unknowns is how many intents ended their fault phase without a final
	// answer (healing settled them, or not).
	Unknowns int `json:"unknowns"`
	// Steps and Hash are the scheduler's steps and the history's SHA-256:
	// the same seed gives the same on any machine.
	Steps int    `json:"steps"`
	Hash  string `json:"historySha256"`
	// First is the first violation (INVALID), Missing what the run never
	// exercised (INCONCLUSIVE).
	First   *Violation `json:"first,omitempty"`
	Missing []string   `json:"missing,omitempty"`
	// Coverage is what the run exercised, in short (every seed that ran):
	// the campaign judges the union of its seeds' coverage.
	Coverage *CoverageCounts `json:"coverage,omitempty"`
	// Error is set when the run could not happen.
	Error string        `json:"error,omitempty"`
	Wall  time.Duration `json:"wallNs"`
	// History is the run's history, kept for the failing seeds only (to
	// shrink one).
	History *History `json:"-"`
}

// CampaignOptions tune Campaign.
type CampaignOptions struct {
	// Parallel is how many seeds run at once (2 when zero).
	Parallel int
	// Done, when set, is told each seed's result as it finishes (in any
	// order).
	Done func(r SeedResult, done, total int)
}

// Campaign runs cfg deterministically once per seed, Parallel at a time,
// each on a fresh bank, and returns the results in the order of seeds. A
// seed whose run could not happen has Error set; the others go on.
func Campaign(ctx context.Context, dbs banks.Databases, cfg Config, seeds []uint64, o CampaignOptions) []SeedResult {
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	cfg.Deterministic = true
	// Each seed's run gets a bank reset to the opening state (sequences
	// too, so a seed's history is the one a fresh bank gives) and the
	// connections the last run on that bank opened.
	dbs, closeDBs := banks.Recycled(dbs)
	defer closeDBs()
	pools := newPoolCache(o.Parallel)
	defer pools.close() // before the banks are dropped
	out := make([]SeedResult, len(seeds))
	var mu sync.Mutex
	done := 0
	sem := make(chan struct{}, o.Parallel)
	var wg sync.WaitGroup
	for i, seed := range seeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c := cfg
			c.Seed = seed
			r := SeedResult{Seed: Seed(seed)}
			if ctx.Err() != nil {
				r.Error = ctx.Err().Error()
			} else {
				h, err := RunOnWith(ctx, dbs, c, Options{pools: pools})
				r = seedResult(seed, h, err)
			}
			mu.Lock()
			out[i] = r
			done++
			n := done
			if o.Done != nil {
				o.Done(r, n, len(seeds))
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func seedResult(seed uint64, h *History, err error) SeedResult {
	r := SeedResult{Seed: Seed(seed)}
	if err != nil {
		r.Error, r.Verdict = err.Error(), "ERROR"
		return r
	}
	res := Check(h)
	r.Verdict, r.Stats, r.Unknowns, r.Wall = res.Verdict(), res.Stats, res.Stats.Healed, h.Wall
	r.Stats.Causes = nil // a seed's line stays short; its own run lists them
	for _, n := range h.Fired {
		r.Faults += n
	}
	if h.Deterministic != nil {
		r.Steps = h.Deterministic.Steps
	}
	r.Hash, _ = h.Hash()
	counts := res.Coverage.Counts()
	r.Coverage = &counts
	switch r.Verdict {
	case Invalid:
		v := *res.First
		r.First, r.History = &v, h
	case Inconclusive:
		r.Missing = res.Coverage.Missing()
	}
	return r
}

// ParseSeeds reads a campaign's seeds: "1-100", "7", "1,5,9", "1-10,20-25".
// At most MaxCampaignSeeds, each once, in the order given.
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	seen := map[uint64]bool{}
	add := func(v uint64) error {
		if seen[v] {
			return fmt.Errorf("seed %d is given twice", v)
		}
		seen[v] = true
		out = append(out, v)
		if len(out) > MaxCampaignSeeds {
			return fmt.Errorf("more than %d seeds", MaxCampaignSeeds)
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a seed or a range of seeds like 1-100", part)
		}
		if !isRange {
			if err := add(a); err != nil {
				return nil, err
			}
			continue
		}
		b, err := strconv.ParseUint(strings.TrimSpace(hi), 10, 64)
		if err != nil || b < a {
			return nil, fmt.Errorf("%q is not a range of seeds like 1-100 (from the lower to the higher)", part)
		}
		if b-a >= MaxCampaignSeeds {
			return nil, fmt.Errorf("%q: more than %d seeds", part, MaxCampaignSeeds)
		}
		for v := a; ; v++ {
			if err := add(v); err != nil {
				return nil, err
			}
			if v == b {
				break
			}
		}
	}
	return out, nil
}

// MaxCampaignSeeds bounds a campaign.
const MaxCampaignSeeds = 10_000

// FirstFailing is the failing seed (INVALID) that comes first in seeds'
// order, or nil.
func FirstFailing(results []SeedResult) *SeedResult {
	for i := range results {
		if results[i].Verdict == Invalid {
			return &results[i]
		}
	}
	return nil
}

// Tally counts a campaign's verdicts.
func Tally(results []SeedResult) map[string]int {
	t := map[string]int{}
	for _, r := range results {
		t[r.Verdict]++
	}
	return t
}

// Judge is a campaign's verdict: INVALID when some seed broke a rule or
// could not run ("ERROR" as its verdict); otherwise VALID when its seeds
// together took every defence path and fired every fault given a rate, and
// INCONCLUSIVE when even together they missed one. A seed that happened not
// to reach a rare path is INCONCLUSIVE on its own, and no failure: another
// seed may have reached it. The union (see Union) says what the seeds
// missed together (Coverage.Missing). rates are the campaign's (each
// seed's) fault rates.
func Judge(results []SeedResult, rates Rates) (verdict string, union Coverage) {
	union = Union(SeedCoverages(results, rates)...)
	for _, r := range results {
		if r.Verdict == Invalid || r.Verdict == "ERROR" {
			return Invalid, union
		}
	}
	if !union.Complete() {
		return Inconclusive, union
	}
	return Valid, union
}

// SeedCoverages is the whole coverage of each seed that ran.
func SeedCoverages(results []SeedResult, rates Rates) []Coverage {
	var out []Coverage
	for _, r := range results {
		if r.Coverage != nil {
			out = append(out, r.Coverage.Coverage(rates))
		}
	}
	return out
}

// Shard is the share of seeds that shard k of n runs (k from 1 to n): the
// i-th seed of the list (from 0) goes to shard i mod n + 1. Every shard gets
// seeds from all along the list, in the list's order, and the n shards
// together run each seed exactly once.
func Shard(seeds []uint64, k, n int) []uint64 {
	var out []uint64
	for i := k - 1; i >= 0 && i < len(seeds) && n > 0; i += n {
		out = append(out, seeds[i])
	}
	return out
}

// SortedVerdicts lists the verdicts of t, worst first.
func SortedVerdicts(t map[string]int) []string {
	order := map[string]int{"ERROR": 0, Invalid: 1, Inconclusive: 2, Valid: 3}
	var out []string
	for v := range t {
		out = append(out, v)
	}
	sort.Slice(out, func(a, b int) bool { return order[out[a]] < order[out[b]] })
	return out
}
