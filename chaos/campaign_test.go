package chaos_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
)

// fullCoverage is a run that took every defence path and fired every fault,
// each at rate 0.01, except the paths in missing.
func fullCoverage(missing ...string) chaos.Coverage {
	var c chaos.Coverage
	for i, p := range chaos.Paths() {
		n := i + 2 // no two paths with the same count
		if slices.Contains(missing, p) {
			n = 0
		}
		c.Paths = append(c.Paths, chaos.PathCount{Path: p, Count: n})
	}
	for _, k := range chaos.FaultKinds() {
		c.Faults = append(c.Faults, chaos.FaultCount{Kind: k, Rate: 0.01, Fired: 1})
	}
	return c
}

// seed is one seed of a campaign that broke no rule, with its coverage.
func seed(n uint64, c chaos.Coverage) chaos.SeedResult {
	counts := c.Counts()
	v := chaos.Valid
	if !c.Complete() {
		v = chaos.Inconclusive
	}
	return chaos.SeedResult{Seed: chaos.Seed(n), Verdict: v, Coverage: &counts, Missing: c.Missing()}
}

func rates() chaos.Rates {
	r := chaos.Rates{}
	for _, k := range chaos.FaultKinds() {
		r[k] = 0.01
	}
	return r
}

// A campaign judges coverage over all its seeds: two seeds that each missed
// another rare path are together complete (VALID); two that missed the same
// one are INCONCLUSIVE together, and the union names it.
func TestCampaignJudgesTheUnionOfItsSeedsCoverage(t *testing.T) {
	t.Parallel()
	a := fullCoverage(chaos.PathWaited)
	b := fullCoverage(chaos.PathFencing)
	u := chaos.Union(a, b)
	if !u.Complete() {
		t.Errorf("one seed missed %s, the other %s: together they missed %q, want nothing", chaos.PathWaited, chaos.PathFencing, u.Missing())
	}
	for i, p := range u.Paths {
		if want := a.Paths[i].Count + b.Paths[i].Count; p.Path != a.Paths[i].Path || p.Count != want {
			t.Errorf("union path %d: %s ×%d, want %s ×%d (the counts add up, in the table's order)", i, p.Path, p.Count, a.Paths[i].Path, want)
		}
	}
	if v, _ := chaos.Judge([]chaos.SeedResult{seed(1, a), seed(2, b)}, rates()); v != chaos.Valid {
		t.Errorf("seeds missing different paths: campaign %s, want %s", v, chaos.Valid)
	}

	c := fullCoverage(chaos.PathWaited, chaos.PathTxRetry)
	v, union := chaos.Judge([]chaos.SeedResult{seed(1, a), seed(3, c)}, rates())
	if v != chaos.Inconclusive {
		t.Errorf("both seeds missed %s: campaign %s, want %s", chaos.PathWaited, v, chaos.Inconclusive)
	}
	if got := union.Unreached(); !reflect.DeepEqual(got, []string{chaos.PathWaited}) {
		t.Errorf("the union did not reach %q, want exactly [%s]", got, chaos.PathWaited)
	}
	if m := union.Missing(); len(m) != 1 || !strings.HasPrefix(m[0], chaos.PathWaited+" never happened (reached by: ") {
		t.Errorf("the union's missing list %q should name %s and what reaches it", m, chaos.PathWaited)
	}

	// A fault that never fired in any seed is missing too; one that fired
	// in one seed is not.
	quiet := func(c chaos.Coverage, kind string) chaos.Coverage {
		c.Faults = slices.Clone(c.Faults)
		for i := range c.Faults {
			if c.Faults[i].Kind == kind {
				c.Faults[i].Fired = 0
			}
		}
		return c
	}
	if got := chaos.Union(quiet(a, chaos.FaultDuplicate), quiet(b, chaos.FaultDuplicate)).Unreached(); !reflect.DeepEqual(got, []string{"fault " + chaos.FaultDuplicate}) {
		t.Errorf("duplicate never fired in either seed: the union did not reach %q", got)
	}
	if got := chaos.Union(quiet(a, chaos.FaultDuplicate), b).Unreached(); len(got) != 0 {
		t.Errorf("duplicate fired in one seed: the union did not reach %q, want nothing", got)
	}

	// One broken rule fails the campaign, whatever the coverage; so does a
	// seed that could not run.
	bad := seed(4, fullCoverage())
	bad.Verdict, bad.First = chaos.Invalid, &chaos.Violation{Kind: chaos.KindTotal}
	if v, _ := chaos.Judge([]chaos.SeedResult{seed(1, a), seed(2, b), bad}, rates()); v != chaos.Invalid {
		t.Errorf("a seed broke a rule: campaign %s, want %s", v, chaos.Invalid)
	}
	if v, _ := chaos.Judge([]chaos.SeedResult{seed(1, a), seed(2, b), {Seed: 5, Verdict: "ERROR", Error: "no database"}}, rates()); v != chaos.Invalid {
		t.Errorf("a seed could not run: campaign %s, want %s", v, chaos.Invalid)
	}
}

// A seed's coverage in short gives the whole back, with what each path is
// and reaches it by, and each fault's rate.
func TestCoverageCountsGiveTheWholeCoverageBack(t *testing.T) {
	t.Parallel()
	h := goodHistory()
	h.Server = map[string]int{chaos.PathTakeover: 2, chaos.PathTxRetry: 1}
	h.Fired = map[string]int{chaos.FaultLoseResponse: 3}
	cov := chaos.Check(h).Coverage
	back := cov.Counts().Coverage(h.Config.Faults)
	if !reflect.DeepEqual(back, cov) {
		t.Errorf("coverage → counts → coverage:\n got %+v\nwant %+v", back, cov)
	}
}

// A shard runs every N-th seed of the list; N shards run each seed once.
func TestShardsShareTheSeedsOnce(t *testing.T) {
	t.Parallel()
	seeds := []uint64{11, 3, 7, 20, 5, 9, 14, 1, 2, 30}
	want := [][]uint64{{11, 20, 14, 30}, {3, 5, 1}, {7, 9, 2}}
	var all []uint64
	for k := 1; k <= 3; k++ {
		got := chaos.Shard(seeds, k, 3)
		if !reflect.DeepEqual(got, want[k-1]) {
			t.Errorf("shard %d/3: %v, want %v", k, got, want[k-1])
		}
		all = append(all, got...)
	}
	slices.Sort(all)
	sorted := slices.Sorted(slices.Values(seeds))
	if !reflect.DeepEqual(all, sorted) {
		t.Errorf("the shards together ran %v, want each of %v once", all, sorted)
	}
	if got := chaos.Shard(seeds, 1, 1); !reflect.DeepEqual(got, seeds) {
		t.Errorf("shard 1/1: %v, want the whole list", got)
	}
}

// The audit's chaos column for the correct handler: a run that broke no rule
// but missed a rare path is followed by runs on the next seeds until the runs
// together reached every path (then nothing is missing), at most a bound; a
// violation in any of them still catches the correct handler.
func TestAuditCleanColumnJudgesItsRunsTogether(t *testing.T) {
	t.Parallel()
	byRun := func(covs ...chaos.Coverage) (func(uint64) (chaos.Result, error), *[]uint64) {
		var ran []uint64
		return func(s uint64) (chaos.Result, error) {
			ran = append(ran, s)
			i := int(s - 40)
			if i >= len(covs) {
				i = len(covs) - 1
			}
			return chaos.Result{Coverage: covs[i]}, nil
		}, &ran
	}

	run, ran := byRun(fullCoverage(chaos.PathWaited, chaos.PathFencing), fullCoverage(chaos.PathFencing), fullCoverage(chaos.PathWaited))
	caught, why, missing, seeds, err := chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, run)
	if err != nil || caught || len(missing) != 0 {
		t.Errorf("runs that together reached every path: caught %v (%s), missing %q, err %v; want clean with nothing missing", caught, why, missing, err)
	}
	if !reflect.DeepEqual(*ran, []uint64{40, 41, 42}) || len(seeds) != 3 {
		t.Errorf("ran seeds %v (reported %v), want 40, 41, 42 and no more once covered", *ran, seeds)
	}

	run, ran = byRun(fullCoverage())
	if _, _, missing, _, _ := chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, run); len(missing) != 0 || len(*ran) != 1 {
		t.Errorf("a first run that reached everything: %d runs, missing %q; want 1 run", len(*ran), missing)
	}

	run, ran = byRun(fullCoverage(chaos.PathWaited))
	_, _, missing, _, _ = chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, run)
	if len(*ran) != chaos.AuditCoverageRuns || len(missing) != 1 || !strings.HasPrefix(missing[0], chaos.PathWaited) {
		t.Errorf("no run ever reached %s: %d runs, missing %q; want %d runs and it named", chaos.PathWaited, len(*ran), missing, chaos.AuditCoverageRuns)
	}

	broken := func(s uint64) (chaos.Result, error) {
		res := chaos.Result{Coverage: fullCoverage(chaos.PathWaited)}
		if s == 41 {
			v := chaos.Violation{Kind: chaos.KindTotal, Detail: "₦10 vanished"}
			res.Violations, res.First = []chaos.Violation{v}, &v
		}
		return res, nil
	}
	if caught, why, _, _, _ := chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, broken); !caught || !strings.Contains(why, "seed 41") {
		t.Errorf("the second run broke a rule: caught %v (%q), want caught, naming seed 41", caught, why)
	}

	// A mistake's row is not done when its runs have reached every path:
	// it goes on, seed after seed, until one catches it.
	lateCatch := func(s uint64) (chaos.Result, error) {
		res := chaos.Result{Coverage: fullCoverage()}
		if s == 42 {
			v := chaos.Violation{Kind: chaos.KindAbandoned, Detail: "key 7 left in progress"}
			res.Violations, res.First = []chaos.Violation{v}, &v
		}
		return res, nil
	}
	if caught, why, _, seeds, _ := chaos.ChaosCell(40, chaos.AuditCoverageRuns, true, lateCatch); !caught || !strings.Contains(why, "seed 42") || len(seeds) != 3 {
		t.Errorf("a mistake the third seed catches: caught %v (%q) after seeds %v, want caught on seed 42, the third", caught, why, seeds)
	}
	if caught, _, _, seeds, _ := chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, lateCatch); caught || len(seeds) != 1 {
		t.Errorf("the correct handler's column, covered by its first run: caught %v after seeds %v, want one run", caught, seeds)
	}
	neverCaught := func(uint64) (chaos.Result, error) { return chaos.Result{Coverage: fullCoverage()}, nil }
	if caught, _, _, seeds, _ := chaos.ChaosCell(40, chaos.AuditCoverageRuns, true, neverCaught); caught || len(seeds) != chaos.AuditCoverageRuns {
		t.Errorf("a mistake no run catches: caught %v after %d runs, want missed after %d", caught, len(seeds), chaos.AuditCoverageRuns)
	}

	failing := func(uint64) (chaos.Result, error) { return chaos.Result{}, errors.New("no database") }
	if _, _, _, _, err := chaos.ChaosCell(40, chaos.AuditCoverageRuns, false, failing); err == nil {
		t.Error("a run that could not happen: no error")
	}

	// A report whose correct handler broke no rule: VALID when its runs
	// reached everything, INCONCLUSIVE (not INVALID) when they did not.
	rep := chaos.AuditReport{Clean: chaos.AuditRow{Caught: map[string]bool{"chaos": false}}}
	if v := rep.Verdict(); v != chaos.Valid {
		t.Errorf("nothing missed, nothing caught: audit %s, want %s", v, chaos.Valid)
	}
	rep.Clean.Missing = []string{"wait-then-replay never happened"}
	if v := rep.Verdict(); v != chaos.Inconclusive {
		t.Errorf("the correct handler's runs missed a path: audit %s, want %s", v, chaos.Inconclusive)
	}
	rep.Clean.Caught["chaos"] = true
	if v := rep.Verdict(); v != chaos.Invalid {
		t.Errorf("the correct handler caught: audit %s, want %s", v, chaos.Invalid)
	}
}
