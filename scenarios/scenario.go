// Package scenarios holds the lesson's stories as runnable, checked
// scenarios. Each scenario is a list of phases: first the run without
// protection, which must break an invariant (proof that the fault is real),
// then the protected run, which must keep them all. A scenario reads top to
// bottom like the story it tells; this file is the machinery they share.
package scenarios

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario is one story.
type Scenario struct {
	Name    string
	Summary string
	Phases  []Phase
}

// Phase is one run of a story on a fresh bank.
type Phase struct {
	Title string
	// Control marks the run without protection: it passes only when the
	// fault breaks at least one invariant.
	Control bool
	Run     func(ctx context.Context, r *Run) error
}

var (
	mu       sync.Mutex
	registry = map[string]Scenario{}
)

// Register adds a scenario; each scenario file registers its own. The
// returned function removes it again (tests register throwaway scenarios).
func Register(s Scenario) (unregister func()) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := registry[s.Name]; dup {
		panic("scenarios: " + s.Name + " registered twice")
	}
	registry[s.Name] = s
	return func() {
		mu.Lock()
		defer mu.Unlock()
		delete(registry, s.Name)
	}
}

// List returns every scenario, sorted by name.
func List() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names returns every scenario's name, sorted.
func Names() []string {
	var names []string
	for _, s := range List() {
		names = append(names, s.Name)
	}
	return names
}

// Get returns the scenario called name.
func Get(name string) (Scenario, bool) {
	mu.Lock()
	defer mu.Unlock()
	s, ok := registry[name]
	return s, ok
}

// Database is a fresh bank for one phase.
type Database struct {
	Pool  *pgxpool.Pool
	Name  string
	Close func() // closes the pool and drops the database
}

// Databases makes fresh banks: a database cloned from the lesson's template.
type Databases interface {
	NewBank(ctx context.Context, label string) (*Database, error)
}

// Observer is told what happens as it happens, so the CLI can print the story
// live. Every method may be a no-op.
type Observer interface {
	ScenarioStart(s Scenario, seed uint64)
	PhaseStart(p Phase, index int)
	Event(e Event)
	PhaseEnd(p PhaseReport)
	ScenarioEnd(r Report)
}

// Event is one line of the story.
type Event struct {
	// Elapsed is real time since the scenario started.
	Elapsed time.Duration `json:"elapsedNs"`
	// Clock is the simulated clock's offset from its start, when the phase
	// uses one ("+31s"); lock expiry runs on it.
	Clock string `json:"clock,omitempty"`
	Kind  string `json:"kind"` // step, attempt, server, expect, balances
	Text  string `json:"text"`
	// OK is set for expectations.
	OK *bool `json:"ok,omitempty"`
}

// Expectation is one thing the lesson says must happen, checked.
type Expectation struct {
	Text string `json:"text"`
	OK   bool   `json:"ok"`
}

// PhaseReport is the outcome of one phase.
type PhaseReport struct {
	Title        string        `json:"title"`
	Control      bool          `json:"control"`
	Events       []Event       `json:"events"`
	Balances     string        `json:"balances"`
	Ledger       bank.Ledger   `json:"ledger"`
	Invariants   []bank.Check  `json:"invariants"`
	Expectations []Expectation `json:"expectations"`
	Passed       bool          `json:"passed"`
	Verdict      string        `json:"verdict"`
	Error        string        `json:"error,omitempty"`
}

// Report is the outcome of one scenario.
type Report struct {
	Scenario string        `json:"scenario"`
	Summary  string        `json:"summary"`
	Seed     uint64        `json:"seed"`
	Phases   []PhaseReport `json:"phases"`
	Passed   bool          `json:"passed"`
	Verdict  string        `json:"verdict"`
	Duration time.Duration `json:"durationNs"`
}

// SeedFor derives a scenario's own seed from the run's seed, so that one
// scenario run alone repeats exactly what it did inside --all.
func SeedFor(seed uint64, name string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, name)
	return h.Sum64()
}

// Execute runs a scenario's phases in order, each on a fresh bank, and checks
// every invariant after each phase. It returns an error only when the
// scenario could not run (no database); a scenario that ran and failed is a
// Report with Passed false.
func Execute(ctx context.Context, s Scenario, dbs Databases, seed uint64, obs Observer) (Report, error) {
	return ExecuteWith(ctx, s, dbs, seed, obs, Options{})
}

// ExecuteWith is Execute with options: a bug switched on in the protected
// phases, or the controls skipped.
func ExecuteWith(ctx context.Context, s Scenario, dbs Databases, seed uint64, obs Observer, o Options) (Report, error) {
	start := time.Now()
	if obs == nil {
		obs = nopObserver{}
	}
	seed = SeedFor(seed, s.Name)
	rep := Report{Scenario: s.Name, Summary: s.Summary, Seed: seed, Passed: true}
	// One database cloned from the template per scenario; its phases reset
	// it to the opening bank instead of cloning again, and keep the pool's
	// connections: opening a backend costs more than the phase's own work.
	dbs, closeDBs := Recycled(dbs)
	defer closeDBs()
	obs.ScenarioStart(s, seed)
	for i, p := range s.Phases {
		if p.Control && o.SkipControls {
			continue
		}
		pr, err := runPhase(ctx, s, p, i, dbs, seed, start, obs, o)
		if err != nil {
			return rep, err
		}
		rep.Phases = append(rep.Phases, pr)
		if !pr.Passed {
			rep.Passed = false
		}
		obs.PhaseEnd(pr)
	}
	rep.Duration = time.Since(start)
	rep.Verdict = verdict(rep)
	obs.ScenarioEnd(rep)
	return rep, nil
}

func verdict(rep Report) string {
	for _, p := range rep.Phases {
		if !p.Passed {
			return fmt.Sprintf("%s: %s", p.Title, p.Verdict)
		}
	}
	controls := 0
	for _, p := range rep.Phases {
		if p.Control {
			controls++
		}
	}
	if controls == 0 {
		return "every expectation and invariant held"
	}
	return "the fault broke the unprotected bank, and the protected bank kept every invariant"
}

func runPhase(ctx context.Context, s Scenario, p Phase, index int, dbs Databases, seed uint64, start time.Time, obs Observer, o Options) (PhaseReport, error) {
	obs.PhaseStart(p, index)
	db, err := dbs.NewBank(ctx, s.Name)
	if err != nil {
		return PhaseReport{}, err
	}
	defer db.Close()

	r := &Run{
		DB:      db.Pool,
		Seed:    seed + uint64(index)*0x9e3779b97f4a7c15,
		start:   start,
		obs:     obs,
		opening: bank.LessonAccounts,
		done:    ctx.Done(),
	}
	if !p.Control {
		r.bug = o.Bug
	}
	r.rng = newRand(r.Seed)
	pr := PhaseReport{Title: p.Title, Control: p.Control}

	runErr := safeRun(ctx, p, r)
	r.cleanup()

	ledger, lerr := bank.ReadLedger(ctx, db.Pool)
	if lerr != nil {
		return PhaseReport{}, lerr
	}
	pr.Ledger = ledger
	pr.Balances = ledger.Line()
	r.emit(Event{Kind: "balances", Text: pr.Balances})
	pr.Invariants = append(bank.CheckInvariants(r.opening, ledger, r.told), r.extra...)
	pr.Events = r.events
	pr.Expectations = r.expectations
	pr.Passed, pr.Verdict = judge(p, pr, runErr)
	if runErr != nil {
		pr.Error = runErr.Error()
	}
	return pr, nil
}

// judge decides a phase. A protected phase must meet every expectation and
// keep every invariant. A control must meet its expectations (it reproduces
// the lesson's numbers) and must break at least one invariant; a control that
// breaks nothing proves nothing, and fails.
func judge(p Phase, pr PhaseReport, runErr error) (bool, string) {
	if runErr != nil {
		return false, "could not finish: " + runErr.Error()
	}
	var missed []string
	for _, e := range pr.Expectations {
		if !e.OK {
			missed = append(missed, e.Text)
		}
	}
	var broken []string
	for _, c := range pr.Invariants {
		if !c.OK {
			broken = append(broken, c.Name)
		}
	}
	if len(missed) > 0 {
		return false, fmt.Sprintf("expected %s", missed[0])
	}
	if p.Control {
		if len(broken) == 0 {
			return false, "the fault did not break the unprotected bank, so this scenario proves nothing"
		}
		return true, fmt.Sprintf("the fault is real: without protection, %s", joinAnd(broken))
	}
	if len(broken) > 0 {
		return false, fmt.Sprintf("invariant broken: %s", joinAnd(broken))
	}
	return true, fmt.Sprintf("all %d invariants hold", len(pr.Invariants))
}

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return "“" + s[0] + "” broke"
	}
	out := ""
	for i, x := range s {
		switch {
		case i == 0:
		case i == len(s)-1:
			out += " and "
		default:
			out += ", "
		}
		out += "“" + x + "”"
	}
	return out + " broke"
}

// safeRun turns a panic in a scenario into an error, so that the rest of the
// suite still runs and the database is still dropped.
func safeRun(ctx context.Context, p Phase, r *Run) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	return p.Run(ctx, r)
}

type nopObserver struct{}

func (nopObserver) ScenarioStart(Scenario, uint64) {}
func (nopObserver) PhaseStart(Phase, int)          {}
func (nopObserver) Event(Event)                    {}
func (nopObserver) PhaseEnd(PhaseReport)           {}
func (nopObserver) ScenarioEnd(Report)             {}
