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
	// HTTP is set for a seed that went over HTTP (CampaignOptions.HTTP): a
	// free run through api/'s servers, the fault proxies and the retrying
	// client, which repeats its intents and the fault of every attempt,
	// not its interleaving. It has no Steps and no Hash.
	HTTP bool `json:"http,omitempty"`
	// Steps and Hash are a deterministic seed's scheduler steps and its
	// history's SHA-256: the same seed gives the same on any machine.
	Steps int    `json:"steps,omitempty"`
	Hash  string `json:"historySha256,omitempty"`
	// Twin is, for a failing seed over HTTP that was to be shrunk, its
	// deterministic twin in process (the same seed and flags): whether the
	// mistake shows without HTTP too.
	Twin *Twin `json:"twin,omitempty"`
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

// Twin is a deterministic run in process of a seed that failed over HTTP:
// the same intents and faults, without api/, the proxies and the retrying
// client, repeatable and so shrinkable.
type Twin struct {
	Verdict string `json:"verdict"`
	// Kind is its first violation's (INVALID).
	Kind  string `json:"kind,omitempty"`
	Steps int    `json:"steps"`
	Hash  string `json:"historySha256"`
}

// Repeat is the command line that repeats seed r of a campaign whose seeds
// run with flags (the campaign's, without --seed): the whole run, history
// byte for byte, for a deterministic seed; its intents and the fault of
// every attempt, and no more, for a seed over HTTP.
func (r SeedResult) Repeat(flags string) string {
	how := "--deterministic"
	if r.HTTP {
		how = "--http"
	}
	return strings.TrimSpace(fmt.Sprintf("bank-sim chaos %s --seed %d %s", how, uint64(r.Seed), strings.TrimSpace(flags)))
}

// CampaignOptions tune Campaign.
type CampaignOptions struct {
	// Parallel is how many seeds run at once (2 when zero).
	Parallel int
	// HTTP holds the seeds that go over HTTP, each as a free run (Config.HTTP,
	// not Deterministic); the others run deterministically in process.
	// HTTPSeeds picks them from the campaign's whole list.
	HTTP map[uint64]bool
	// Done, when set, is told each seed's result as it finishes (in any
	// order).
	Done func(r SeedResult, done, total int)
}

// Campaign runs cfg once per seed, Parallel at a time, each on a fresh
// bank, and returns the results in the order of seeds: deterministically in
// process, or, for the seeds in o.HTTP, as a free run over HTTP. A seed
// whose run could not happen has Error set; the others go on.
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
			if o.HTTP[seed] {
				// Sockets and HTTP servers run on real time, which no
				// scheduler orders: a free run.
				c.HTTP, c.Deterministic = true, false
			}
			r := SeedResult{Seed: Seed(seed), HTTP: c.HTTP}
			if ctx.Err() != nil {
				r.Error = ctx.Err().Error()
			} else {
				began := time.Now()
				h, err := RunOnWith(ctx, dbs, c, Options{pools: pools})
				r = seedResult(seed, h, err)
				r.HTTP = c.HTTP
				if r.Wall == 0 {
					// Only a deterministic run times itself.
					r.Wall = time.Since(began)
				}
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
		// Only a deterministic history repeats: a free run's hash would
		// promise what its seed does not give again.
		r.Steps = h.Deterministic.Steps
		r.Hash, _ = h.Hash()
	}
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

// TwinOf is the Twin that h, a seed's deterministic run in process, makes
// of that seed's run over HTTP: its verdict, first violation's kind, steps
// and hash, read as a campaign reads any seed's.
func TwinOf(seed uint64, h *History) *Twin {
	r := seedResult(seed, h, nil)
	tw := &Twin{Verdict: r.Verdict, Steps: r.Steps, Hash: r.Hash}
	if r.First != nil {
		tw.Kind = r.First.Kind
	}
	return tw
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

// CampaignHTTPEvery is how often a campaign's seed goes over HTTP unless
// told otherwise (chaos --seeds --http-every): the 4th, 8th, … seed of the
// list. In process the handler never meets api/ (its decoder, its problem
// details, its replays' headers and bytes, GET /transfers?key=), the
// fault proxies nor the retrying client, so a campaign all in process
// cannot see a mistake there; three seeds in four stay deterministic,
// each repeating exactly and shrinkable.
const CampaignHTTPEvery = 4

// HTTPSeeds are the seeds of a campaign's whole list that go over HTTP:
// every n-th (the n-th, the 2n-th, …, counting from 1 in the list's
// order), none when n is 0. Which seeds they are depends on the list
// alone, so every shard of a campaign agrees.
func HTTPSeeds(seeds []uint64, n int) map[uint64]bool {
	out := map[uint64]bool{}
	for i := n - 1; n > 0 && i < len(seeds); i += n {
		out[seeds[i]] = true
	}
	return out
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
