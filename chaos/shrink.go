package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/banks"
)

// ShrinkOptions tune Shrink.
type ShrinkOptions struct {
	// Kind is the rule the smaller run must still break: the kind of the
	// failing run's first violation when "".
	Kind string
	// Budget bounds how many runs Shrink makes (DefaultShrinkBudget when
	// zero); it returns the smallest failing run found by then.
	Budget int
	// Log, when set, is told each time a smaller run still fails.
	Log func(format string, args ...any)
}

// DefaultShrinkBudget is how many runs Shrink makes at most.
const DefaultShrinkBudget = 400

// ErrNotFailing is returned by Shrink for a run that broke no rule.
var ErrNotFailing = errors.New("chaos: nothing to shrink: the run broke no rule")

// Shrink finds, from a failing deterministic run of cfg (h is its
// history), a smallest run that still breaks the same rule, by delta
// debugging: fewer intents (the violation's own first, then halves and
// quarters of the rest), fewer and simpler faults, fewer repeats, clients,
// server copies, attempts and accounts, no auditor, and at last the
// schedule: the default policy (each task runs until it must wait) with
// only the preemptions the failure needs, out of those the failing
// interleaving made. Every run is deterministic, so each candidate is
// tried once. The result is a Recipe.
func Shrink(ctx context.Context, dbs banks.Databases, cfg Config, h *History, o ShrinkOptions) (*Recipe, error) {
	cfg = cfg.WithDefaults()
	cfg.Deterministic = true
	res := Check(h)
	if res.Valid() {
		return nil, ErrNotFailing
	}
	if o.Kind == "" {
		o.Kind = res.First.Kind
	}
	if res.ByKind[o.Kind] == 0 {
		return nil, fmt.Errorf("chaos: the run broke no rule %q", o.Kind)
	}
	if o.Budget <= 0 {
		o.Budget = DefaultShrinkBudget
	}
	dbs, closeDBs := banks.Recycled(dbs)
	defer closeDBs()
	// One run at a time: one bank's pool kept.
	pools := newPoolCache(1)
	defer pools.close() // before the banks are dropped
	s := &shrinker{ctx: ctx, dbs: dbs, pools: pools, kind: o.Kind, seed: cfg.Seed, bug: cfg.Bug, budget: o.Budget, log: o.Log}
	if s.log == nil {
		s.log = func(string, ...any) {}
	}
	base := candidate{script: ScriptOf(cfg, h), clients: cfg.Clients, servers: cfg.Instances,
		attempts: cfg.MaxAttempts, auditSteps: cfg.AuditSteps, il: cfg.Interleaving,
		dispatchers: cfg.Dispatchers, pipeRates: Rates{}, fire: cfg.PipelineFaults}
	if base.dispatchers <= 0 {
		base.dispatchers = 3
	}
	for _, k := range outbox.PipelineFaults() {
		if cfg.Faults[k] > 0 {
			base.pipeRates[k] = cfg.Faults[k]
		}
	}
	fired := 0
	for _, n := range h.Fired {
		fired += n
	}
	from := sizes{Intents: len(h.Intents), Clients: cfg.Clients, Faults: fired, Servers: cfg.Instances}
	if h.Deterministic != nil {
		from.Steps = h.Deterministic.Steps
	}
	if !s.test(&base) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("chaos: the run does not break %q again when its workload is written out as a script (%s); it cannot be shrunk", o.Kind, s.lastErr)
	}
	// Fewer dispatchers first: each is one more task the random schedule
	// picks among the clients, and a race between two clients comes
	// less often among more.
	best := s.fewerDispatchers(s.pipelineAtMost(base))
	for round := 0; round < 3; round++ {
		before := best.size()
		best = s.intents(best, h, round == 0)
		best = s.dropAttempts(best)
		best = s.faults(best)
		best = s.simplerFaults(best)
		best = s.flags(best)
		best = s.knobs(best)
		if best.size() == before || ctx.Err() != nil {
			break
		}
	}
	best = s.pipelineFirings(best)
	best = s.schedule(best)
	if best.il != nil && best.il.Policy == PolicyDefault && len(best.il.Preemptions) > 0 {
		// Under the few preemptions left, faults, the auditor or a client
		// the random schedule needed may not be needed any more.
		before := best.size()
		s.pinned = true
		best = s.faults(best)
		best = s.pipelineFirings(best)
		best = s.knobs(best)
		if best.size() != before {
			best = s.fewerPreemptions(best)
		}
	}
	best = s.trim(best)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.recipe(best, from, o.Kind), nil
}

type shrinker struct {
	ctx     context.Context
	dbs     banks.Databases
	pools   *poolCache
	kind    string
	seed    uint64
	bug     *mistakes.Bug
	runs    int
	budget  int
	log     func(string, ...any)
	lastErr error
	// pinned keeps each candidate's interleaving: once the schedule is
	// shrunk, a smaller run must fail under it.
	pinned bool
}

// candidate is one run the shrinker tries: a script and the knobs around it.
type candidate struct {
	script     *Script
	clients    int
	servers    int
	attempts   int
	auditSteps int
	il         *Interleaving // nil: random from the seed
	// The side effects' pipeline: its dispatchers, the rates of its
	// faults (per chance, as in a free run), and the decisions that fire
	// whatever the rates (a recipe's).
	dispatchers int
	pipeRates   Rates
	fire        []outbox.Firing

	h         *History // its run, once it failed
	decisions []Decision
}

func (c candidate) size() [6]int {
	rules := 0
	if c.il != nil {
		rules = len(c.il.Preemptions)
	}
	return [6]int{len(c.script.Intents), c.script.faults() + len(c.pipeRates) + len(c.fire), c.clients + c.dispatchers, c.servers, c.attempts, rules}
}

func (s *shrinker) config(c candidate) Config {
	rates := Rates{}
	for _, in := range c.script.Intents {
		for _, a := range in.Attempts {
			if a.Fault != "" {
				rates[a.Fault] = 1
			}
		}
	}
	for k, r := range c.pipeRates {
		rates[k] = r
	}
	return Config{Seed: s.seed, Clients: c.clients, Instances: c.servers, MaxAttempts: c.attempts, Faults: rates,
		Bug: s.bug, Deterministic: true, Interleaving: c.il, AuditSteps: c.auditSteps, Script: c.script,
		Dispatchers: c.dispatchers, PipelineFaults: c.fire}.WithDefaults()
}

// test runs c and reports whether it breaks the rule; if it does, c keeps
// its run.
func (s *shrinker) test(c *candidate) bool {
	if s.runs >= s.budget || s.ctx.Err() != nil {
		return false
	}
	s.runs++
	var ds []Decision
	h, err := RunOnWith(s.ctx, s.dbs, s.config(*c), Options{Decisions: func(d Decision) { ds = append(ds, d) }, pools: s.pools})
	if err != nil {
		s.lastErr = err
		return false
	}
	if Check(h).ByKind[s.kind] == 0 {
		return false
	}
	c.h, c.decisions = h, ds
	return true
}

// try tries c with its interleaving, and then, if that did not fail (and
// the schedule is not pinned), with the seed's random one and with the
// default policy.
func (s *shrinker) try(c candidate) (candidate, bool) {
	tried := map[string]bool{}
	ils := []*Interleaving{c.il, nil, {Policy: PolicyDefault}}
	if s.pinned {
		ils = ils[:1]
	}
	for _, il := range ils {
		k := "random"
		if il != nil {
			k = fmt.Sprintf("%s %v", il.Policy, il.Preemptions)
		}
		if tried[k] {
			continue
		}
		tried[k] = true
		c.il = il
		if s.test(&c) {
			return c, true
		}
	}
	return c, false
}

// ddmin is Zeller's delta debugging: a 1-minimal subset of units for which
// fails holds (fails(units) must hold).
func ddmin(units []int, fails func([]int) bool) []int {
	n := 2
	for len(units) >= 2 {
		chunks := split(units, n)
		reduced := false
		for _, c := range chunks {
			if fails(c) {
				units, n, reduced = c, 2, true
				break
			}
		}
		if !reduced && n > 2 {
			for _, c := range chunks {
				if comp := without(units, c); fails(comp) {
					units, n, reduced = comp, max(n-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if n >= len(units) {
				break
			}
			n = min(2*n, len(units))
		}
	}
	return units
}

func split(units []int, n int) [][]int {
	var out [][]int
	for i := range n {
		lo, hi := i*len(units)/n, (i+1)*len(units)/n
		if hi > lo {
			out = append(out, units[lo:hi])
		}
	}
	return out
}

func without(units, drop []int) []int {
	skip := map[int]bool{}
	for _, d := range drop {
		skip[d] = true
	}
	var out []int
	for _, u := range units {
		if !skip[u] {
			out = append(out, u)
		}
	}
	return out
}

// keepIntents is sc with only the intents keep names (indices, sorted),
// numbered again from 0; a follower goes with the intent it follows: it is
// kept only if that one is (kept, not only named: its own leader may have
// gone).
func keepIntents(sc *Script, keep []int) *Script {
	in := map[int]bool{}
	for _, k := range keep {
		in[k] = true
	}
	out := &Script{Opening: sc.Opening}
	kept := make([]bool, len(sc.Intents))
	for i, x := range sc.Intents {
		if !in[i] || x.Follower && (i == 0 || !kept[i-1]) {
			continue
		}
		kept[i] = true
		x.Label = fmt.Sprintf("intent-%d", len(out.Intents))
		if x.Reuse != "" {
			x.ReuseOf = len(out.Intents) - 1
		}
		x.Attempts = append([]ScriptAttempt(nil), x.Attempts...)
		out.Intents = append(out.Intents, x)
	}
	return out
}

// intents keeps as few intents as still fail: first the intents the
// violations name (with the intent each follows or is followed by), then
// the intents begun before the first violation, then delta debugging.
func (s *shrinker) intents(best candidate, h *History, first bool) candidate {
	n := len(best.script.Intents)
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	with := func(keep []int) (candidate, bool) {
		c := best
		c.script = keepIntents(best.script, keep)
		if len(c.script.Intents) == 0 {
			return c, false
		}
		c.clients = min(c.clients, len(c.script.Intents))
		return s.try(c)
	}
	if first && h != nil {
		var suspects [][]int
		seen := map[int]bool{}
		for _, v := range Check(best.h).Violations {
			if v.Kind != s.kind || v.Intent < 0 || v.Intent >= n || seen[v.Intent] {
				continue
			}
			seen[v.Intent] = true
			group := []int{v.Intent}
			if best.script.Intents[v.Intent].Follower {
				group = []int{v.Intent - 1, v.Intent}
			} else if v.Intent+1 < n && best.script.Intents[v.Intent+1].Follower {
				group = append(group, v.Intent+1)
			}
			suspects = append(suspects, group)
			if len(suspects) == 4 {
				break
			}
		}
		for _, g := range suspects {
			if c, ok := with(g); ok {
				s.log("%d intents → %d: the violation's own", n, len(c.script.Intents))
				return s.intents(c, nil, false)
			}
		}
		if v := Check(best.h).First; v != nil && v.Kind == s.kind {
			var before []int
			for i, in := range best.h.Intents {
				if len(in.Attempts) > 0 && in.Attempts[0].StartNs <= v.AtNs {
					before = append(before, i)
				}
			}
			if len(before) > 0 && len(before) < n {
				if c, ok := with(before); ok {
					s.log("%d intents → %d: those begun before the violation", n, len(c.script.Intents))
					best, n = c, len(c.script.Intents)
					all = all[:n]
				}
			}
		}
	}
	cur := best
	keep := ddmin(all, func(keep []int) bool {
		c, ok := with(keep)
		if ok {
			cur = c
		}
		return ok
	})
	if len(keep) < n {
		s.log("%d intents → %d", n, len(cur.script.Intents))
		return cur
	}
	return best
}

type faultRef struct{ intent, attempt int }

func (c candidate) faultRefs() []faultRef {
	var out []faultRef
	for i, in := range c.script.Intents {
		for a, at := range in.Attempts {
			if at.Fault != "" {
				out = append(out, faultRef{i, a})
			}
		}
	}
	return out
}

// faults keeps as few faulted attempts as still fail.
func (s *shrinker) faults(best candidate) candidate {
	refs := best.faultRefs()
	if len(refs) == 0 {
		return best
	}
	units := make([]int, len(refs))
	for i := range units {
		units[i] = i
	}
	cur := best
	keep := ddmin(units, func(keep []int) bool {
		c := best
		c.script = best.script.clone()
		kept := map[int]bool{}
		for _, k := range keep {
			kept[k] = true
		}
		for i, r := range refs {
			if !kept[i] {
				c.script.Intents[r.intent].Attempts[r.attempt].Fault = ""
				c.script.Intents[r.intent].Attempts[r.attempt].Disconnect = 0
			}
		}
		c, ok := s.try(c)
		if ok {
			cur = c
		}
		return ok
	})
	// ddmin never tries none at all.
	if len(keep) == 1 {
		c := cur
		c.script = cur.script.clone()
		r := refs[keep[0]]
		c.script.Intents[r.intent].Attempts[r.attempt].Fault = ""
		c.script.Intents[r.intent].Attempts[r.attempt].Disconnect = 0
		if c, ok := s.try(c); ok {
			cur, keep = c, nil
		}
	}
	if len(keep) < len(refs) {
		s.log("%d faults → %d", len(refs), len(keep))
		return cur
	}
	return best
}

// dropAttempts removes attempts from the fault phase of each intent, one at
// a time: the attempts after it come one earlier (a fault on attempt 2 may
// need no attempt 1 before it).
func (s *shrinker) dropAttempts(best candidate) candidate {
	for i := range best.script.Intents {
		for a := 0; a < len(best.script.Intents[i].Attempts) && a < best.attempts; {
			if len(best.script.Intents[i].Attempts) == 1 {
				break
			}
			c := best
			c.script = best.script.clone()
			as := c.script.Intents[i].Attempts
			c.script.Intents[i].Attempts = append(as[:a:a], as[a+1:]...)
			if c, ok := s.try(c); ok {
				s.log("%s: attempt %d dropped (%s)", c.script.Intents[i].Label, a+1, orNoFault(as[a].Fault))
				best = c
				continue
			}
			a++
		}
	}
	return best
}

// simplicity orders the faults from the one a person grasps at once to the
// staged races.
var simplicity = []string{FaultLoseResponse, FaultDropRequest, FaultSlow, FaultLate, FaultDuplicate, FaultClockJump,
	FaultFailBeforeCommit, FaultDisconnect, FaultCrashAfterClaim, FaultFreeze, FaultDeadlock, FaultExpireMidWrite}

func simpler(f string) []string {
	for i, k := range simplicity {
		if k == f {
			return simplicity[:i]
		}
	}
	return nil
}

// simplerFaults replaces each fault with the simplest one that still fails.
func (s *shrinker) simplerFaults(best candidate) candidate {
	for _, r := range best.faultRefs() {
		f := best.script.Intents[r.intent].Attempts[r.attempt].Fault
		for _, g := range simpler(f) {
			c := best
			c.script = best.script.clone()
			a := &c.script.Intents[r.intent].Attempts[r.attempt]
			a.Fault, a.Disconnect = g, 0
			if c, ok := s.try(c); ok {
				s.log("%s → %s (%s attempt %d)", f, g, c.script.Intents[r.intent].Label, r.attempt+1)
				best = c
				break
			}
		}
	}
	return best
}

// flags drops the repeats (after the final answer, after the cleanup) the
// failure does not need.
func (s *shrinker) flags(best candidate) candidate {
	for i := range best.script.Intents {
		for _, which := range []string{"repeat", "after-cleanup"} {
			in := best.script.Intents[i]
			if which == "repeat" && (!in.Repeat || in.Reuse != "") || which == "after-cleanup" && !in.AfterCleanup {
				continue
			}
			c := best
			c.script = best.script.clone()
			if which == "repeat" {
				c.script.Intents[i].Repeat = false
			} else {
				c.script.Intents[i].AfterCleanup = false
			}
			if c, ok := s.try(c); ok {
				s.log("no %s for %s", which, in.Label)
				best = c
			}
		}
	}
	return best
}

// knobs lowers the clients, the server copies and the attempts, turns the
// auditor off, and drops the accounts no intent names.
func (s *shrinker) knobs(best candidate) candidate {
	for n := 1; n < best.clients; n++ {
		c := best
		c.clients = n
		if c, ok := s.try(c); ok {
			s.log("%d clients → %d", best.clients, n)
			best = c
			break
		}
	}
	for n := 1; n < best.servers; n++ {
		c := best
		c.servers = n
		c.script = best.script.clone()
		for i := range c.script.Intents {
			for a := range c.script.Intents[i].Attempts {
				at := &c.script.Intents[i].Attempts[a]
				at.Server = min(at.Server, n-1)
			}
		}
		if c, ok := s.try(c); ok {
			s.log("%d servers → %d", best.servers, n)
			best = c
			break
		}
	}
	best = s.fewerDispatchers(best)
	last := 1
	for _, r := range best.faultRefs() {
		last = max(last, r.attempt+1)
	}
	for n := last; n < best.attempts; n++ {
		c := best
		c.attempts = n
		if c, ok := s.try(c); ok {
			s.log("%d attempts → %d", best.attempts, n)
			best = c
			break
		}
	}
	if best.auditSteps >= 0 {
		c := best
		c.auditSteps = -1
		if c, ok := s.try(c); ok {
			s.log("no auditor")
			best = c
		}
	}
	named := map[int64]bool{}
	for _, in := range best.script.Intents {
		named[in.Request.From], named[in.Request.To] = true, true
	}
	var opening []bank.Account
	for _, a := range best.script.Opening {
		if named[a.ID] {
			opening = append(opening, a)
		}
	}
	if len(opening) < len(best.script.Opening) {
		c := best
		c.script = best.script.clone()
		c.script.Opening = opening
		if c, ok := s.try(c); ok {
			s.log("%d accounts → %d", len(best.script.Opening), len(opening))
			best = c
		}
	}
	return best
}

// schedule replaces the failing interleaving by the default policy and the
// fewest of its preemptions that still fail.
func (s *shrinker) schedule(best candidate) candidate {
	c := best
	c.il = &Interleaving{Policy: PolicyDefault}
	if s.test(&c) {
		return c
	}
	if best.il != nil && best.il.Policy == PolicyDefault {
		return s.fewerPreemptions(best)
	}
	var rules []Preemption
	for _, d := range best.decisions {
		if d.Ran != d.Default && d.stop.Task != "" {
			p := d.stop
			p.Run = d.Ran
			rules = append(rules, p)
		}
	}
	c = best
	c.il = &Interleaving{Policy: PolicyDefault, Preemptions: rules}
	if !s.test(&c) {
		s.log("the interleaving stays random: its choices, replayed as preemptions, do not fail again")
		return best
	}
	s.log("schedule: the default policy and %d preemptions", len(rules))
	return s.fewerPreemptions(c)
}

func (s *shrinker) fewerPreemptions(best candidate) candidate {
	rules := best.il.Preemptions
	units := make([]int, len(rules))
	for i := range units {
		units[i] = i
	}
	cur := best
	keep := ddmin(units, func(keep []int) bool {
		c := best
		c.il = &Interleaving{Policy: PolicyDefault}
		for _, k := range keep {
			c.il.Preemptions = append(c.il.Preemptions, rules[k])
		}
		if s.test(&c) {
			cur = c
			return true
		}
		return false
	})
	if len(keep) < len(rules) {
		s.log("%d preemptions → %d", len(rules), len(keep))
		return cur
	}
	return best
}

// trim cuts each intent's attempts to those its run made: the recipe lists
// no attempt that never happens.
func (s *shrinker) trim(best candidate) candidate {
	if best.h == nil {
		return best
	}
	c := best
	c.script = best.script.clone()
	changed := false
	for i := range c.script.Intents {
		if i >= len(best.h.Intents) {
			break
		}
		as := c.script.Intents[i].Attempts
		if made := len(best.h.Intents[i].Attempts); made > 0 && made < len(as) {
			as = as[:made]
		}
		// An attempt past the last one listed lands where the last one
		// did, with no fault: those need no line.
		for len(as) > 1 && as[len(as)-1].Fault == "" && as[len(as)-1].Server == as[len(as)-2].Server {
			as = as[:len(as)-1]
		}
		if len(as) < len(c.script.Intents[i].Attempts) {
			c.script.Intents[i].Attempts = as
			changed = true
		}
	}
	if changed && s.test(&c) {
		return c
	}
	return best
}

// sizes measure a run for the recipe: before and after shrinking.
type sizes struct {
	Intents int `json:"intents"`
	Clients int `json:"clients"`
	Faults  int `json:"faults"`
	Servers int `json:"servers"`
	// Steps is how many choices its scheduler made.
	Steps int `json:"steps"`
	// Preemptions is how many of them a recipe makes against its policy.
	Preemptions int `json:"preemptions"`
}

func (s *shrinker) recipe(best candidate, from sizes, kind string) *Recipe {
	res := Check(best.h)
	var v Violation
	for _, x := range res.Violations {
		if x.Kind == kind {
			v = x
			break
		}
	}
	r := &Recipe{Format: RecipeFormat, Version: RecipeVersion, Seed: Seed(s.seed), Clients: best.clients,
		Dispatchers: best.dispatchers, PipelineFaults: best.h.PipelineFaults,
		Servers: best.servers, Attempts: best.attempts, AuditSteps: best.auditSteps, Interleaving: best.il,
		Script: best.script, Violation: RecipeViolation{Kind: kind, Detail: v.Detail, Intent: v.Intent}, From: from, Runs: s.runs}
	if s.bug != nil {
		r.Bug = s.bug.Name
	}
	if r.Interleaving == nil {
		r.Interleaving = &Interleaving{Policy: PolicyRandom}
	}
	r.To = sizes{Intents: len(best.script.Intents), Clients: best.clients, Faults: best.script.faults() + len(r.PipelineFaults), Servers: best.servers,
		Preemptions: len(r.Interleaving.Preemptions)}
	if best.h.Deterministic != nil {
		r.To.Steps = best.h.Deterministic.Steps
	}
	sort.SliceStable(r.Script.Opening, func(a, b int) bool { return r.Script.Opening[a].ID < r.Script.Opening[b].ID })
	return r
}

// pipelineAtMost turns the side effects' faults that fired into faults
// that fire at every chance, if the run still fails so: all of them, or
// else one alone (the others off). A smaller workload has other outbox rows
// and events, which the rates' draws would miss, where a fault at every
// chance still strikes. First it tries none: a mistake that two
// dispatchers polling side by side show with no fault
// (claim-without-lease-check) would otherwise start from every fault at
// every chance, where one dispatcher's crash shows it too, and be left
// with one dispatcher and the intents its crashes and pauses need.
func (s *shrinker) pipelineAtMost(best candidate) candidate {
	if len(best.pipeRates) == 0 || best.h == nil || len(best.h.PipelineFaults) == 0 {
		return best
	}
	var kinds []string
	for _, k := range outbox.PipelineFaults() {
		for _, f := range best.h.PipelineFaults {
			if f.Fault == k {
				kinds = append(kinds, k)
				break
			}
		}
	}
	tries := [][]string{nil, kinds}
	if len(kinds) > 1 {
		for _, k := range kinds {
			tries = append(tries, []string{k})
		}
	}
	for _, ks := range tries {
		c := best
		c.pipeRates = Rates{}
		if ks == nil {
			c.fire = nil
		}
		for _, k := range ks {
			c.pipeRates[k] = 1
		}
		if c, ok := s.try(c); ok {
			if ks == nil {
				s.log("the side effects' faults: none")
			} else {
				s.log("the side effects' faults: %s at every chance", c.pipeRates)
			}
			return c
		}
	}
	return best
}

// pipelineFirings replaces the side effects' fault rates by the decisions
// that fired in the run (the same run again), then keeps as few of them as
// still fail.
func (s *shrinker) pipelineFirings(best candidate) candidate {
	if best.h == nil {
		return best
	}
	if len(best.pipeRates) > 0 {
		c := best
		c.pipeRates, c.fire = nil, best.h.PipelineFaults
		if !s.test(&c) {
			return best
		}
		best = c
	}
	fire := best.fire
	if len(fire) == 0 {
		return best
	}
	units := make([]int, len(fire))
	for i := range units {
		units[i] = i
	}
	with := func(keep []int) candidate {
		c := best
		c.fire = nil
		for _, k := range keep {
			c.fire = append(c.fire, fire[k])
		}
		return c
	}
	cur := best
	keep := ddmin(units, func(keep []int) bool {
		c, ok := s.try(with(keep))
		if ok {
			cur = c
		}
		return ok
	})
	if len(keep) == 1 {
		if c, ok := s.try(with(nil)); ok {
			cur, keep = c, nil
		}
	}
	if len(keep) < len(fire) {
		s.log("%d side-effect faults → %d", len(fire), len(keep))
		return cur
	}
	return best
}

// fewerDispatchers runs as few of the outbox's dispatchers as still fail.
func (s *shrinker) fewerDispatchers(best candidate) candidate {
	for n := 1; n < best.dispatchers; n++ {
		c := best
		c.dispatchers = n
		if c, ok := s.try(c); ok {
			s.log("%d dispatchers → %d", best.dispatchers, n)
			return c
		}
	}
	return best
}
