// Package scenarios holds the lesson's stories as runnable, checked
// scenarios. Each scenario is a list of phases: first the run without
// protection, which must break an invariant (proof that the fault is real),
// then the protected run, which must keep them all. A scenario reads top to
// bottom like the story it tells; this file is the machinery they share.
package scenarios

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Scenario is one story. Name, Summary and Phases make it run; the other
// fields are its teaching material, for list, explain, compare and the order
// of --all. A new story needs only the first three; see "Writing a
// scenario" in docs/teaching.md for what each of the others adds.
type Scenario struct {
	Name    string
	Summary string
	Phases  []Phase

	// Title is the story's name for people ("The response that never
	// arrives"); Name when empty.
	Title string
	// Lesson is the section of the lesson this story follows ("" for a story
	// of bank-sim's own): list and explain show it, and only a story from the
	// lesson is told "as the lesson says".
	Lesson string
	// Article is, for a story that follows the seed article on event-driven
	// idempotency (ArticleTitle) rather than the lesson, the article's
	// section. Such a story is listed and explained in a group of its own,
	// between the lesson's and bank-sim's own: the lesson does not tell it,
	// so none of its checks is "as the lesson says", but bank-sim did not
	// make it up either, and a learner can read where it comes from.
	Article string
	// Order is the story's place in the lesson, or in the article (see the
	// Order… constants): list, --all and the reports follow it. Zero puts
	// the story after the others, with bank-sim's own stories, by name.
	Order int
	// Amount is the story's transfer amount in kobo, which `scenario
	// --amount` may change (read it with Run.Amount); zero when the story has
	// no single amount to change.
	Amount int64
	// Explain is what `bank-sim explain NAME` prints.
	Explain Explanation

	// OwnServers marks a story that starts the PostgreSQL servers it runs
	// on (the failover story's primary and standby): its phases get no
	// bank of the run's database (each brings its own, Run.UseDB), and a
	// run of such stories alone needs no other server.
	OwnServers bool
	// Prepare, when set, runs as the story starts, before its first phase;
	// what it returns reaches every phase as Run.Prepared, and release runs
	// once the last phase has ended, however it ended. The failover story
	// starts every phase's pair there at once, so that the protected
	// phase's pair is ready when the control has finished with its own.
	Prepare func(ctx context.Context, o Options) (prepared any, release func())
}

// Explanation is a story's handout, in bank-sim's own words: what the story
// shows, why the bank breaks without protection, the defence that fixes it,
// and the SQL that carries the defence.
type Explanation struct {
	Shows   string
	Breaks  string
	Defence string
	SQL     string
	// Cost, when the defence has a price worth naming (a commit that waits
	// for a standby), says what it is, measured.
	Cost string
}

// The lesson's order, with room between for stories added later: a story
// that belongs between two others takes a number between theirs.
const (
	OrderPartialFailure = 100  // "Partial failure"
	OrderRules          = 200  // "The transfer, done properly"
	OrderBalanceRace    = 250  // "Think before you move money": enough money, atomically
	OrderLostResponse   = 300  // "The response that never arrives", "The lost response, again"
	OrderKeyMisuse      = 400  // "Misuse: a reused key, another user, no key"
	OrderDoubleTap      = 500  // "Two copies at the same moment"
	OrderCrash          = 600  // "A server that crashes, and one that is only slow"
	OrderHTTP           = 700  // "Over HTTP, with a retrying client"
	OrderSideEffects    = 800  // "Side effects outside the database"
	OrderFailureCases   = 900  // "Failure cases and production concerns"
	OrderPractice       = 1000 // "Practice": the exercises
)

// ArticleTitle is the seed article that the stories with an Article follow:
// Manuj Dixit's practical guide, which grows an order API from PostgreSQL
// keys to a Redis lock, Kafka, an outbox and idempotent consumers.
const ArticleTitle = "Idempotency: From a Simple API to Reliable Event-Driven Systems"

// The article's order, after the lesson's stories: its phases, with room
// between.
const (
	OrderArticleLock      = 2200 // "Phase 2: Add Redis only when there is a reason"
	OrderArticleDualWrite = 2300 // "Phase 3: Introduce Kafka": the dual-write problem
	OrderArticleOutbox    = 2400 // "Phase 4: Add the transactional outbox": the dispatcher
	OrderArticleConsumer  = 2500 // "Phase 5: Make Kafka consumers idempotent"
)

// DisplayTitle is the story's title, or its name.
func (s Scenario) DisplayTitle() string {
	if s.Title != "" {
		return s.Title
	}
	return s.Name
}

// FromLesson reports whether the story follows a section of the lesson.
func (s Scenario) FromLesson() bool { return s.Lesson != "" }

// FromArticle reports whether the story follows a section of the seed
// article (ArticleTitle) and not the lesson.
func (s Scenario) FromArticle() bool { return s.Lesson == "" && s.Article != "" }

// Own reports whether the story is bank-sim's own: neither the lesson nor
// the article tells it.
func (s Scenario) Own() bool { return s.Lesson == "" && s.Article == "" }

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

// List returns every scenario in the lesson's order (Order), then the
// article's in its order, then bank-sim's own stories by name.
func List() []Scenario {
	mu.Lock()
	defer mu.Unlock()
	out := make([]Scenario, 0, len(registry))
	for _, s := range registry {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return before(out[i], out[j]) })
	return out
}

func before(a, b Scenario) bool {
	if (a.Order == 0) != (b.Order == 0) {
		return a.Order != 0
	}
	if a.Order != b.Order {
		return a.Order < b.Order
	}
	return a.Name < b.Name
}

// Names returns every scenario's name, in List's order.
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

// Observer is told what happens as it happens, so the CLI can print the story
// live. Every method may be a no-op.
type Observer interface {
	ScenarioStart(s Scenario, seed uint64)
	PhaseStart(p Phase, index int)
	Event(e Event)
	PhaseEnd(p PhaseReport)
	ScenarioEnd(r Report)
}

// Event is one thing that happened in a phase, in the order it happened.
// Text is the full text (keys and lock ids whole); the CLI shortens it for
// people. From, To and Lane place it in a picture of the run (the lanes are
// the clients, "network", the servers and "database"); an event without
// them is narration.
type Event struct {
	// Elapsed is real time since the scenario started, less the time a
	// watcher held it (Options.Held: a teacher's pauses).
	Elapsed time.Duration `json:"elapsedNs"`
	// Clock is the simulated clock's offset from its start, when the phase
	// uses one ("+31 s"); lock expiry runs on it.
	Clock string `json:"clock,omitempty"`
	// Kind is one of the Kind… constants.
	Kind string `json:"kind"`
	Text string `json:"text"`
	// OK is set for expectations, and Source says whose they are.
	OK     *bool  `json:"ok,omitempty"`
	Source string `json:"source,omitempty"`
	// From and To are the lanes of an arrow: a request, an answer, a
	// server's work in the database.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Lane is where a note or a fault sits.
	Lane string `json:"lane,omitempty"`
	// Fault names the fault that struck here.
	Fault string `json:"fault,omitempty"`
	// Delivery numbers the request an arrow belongs to, so that a picture
	// can join its pieces (client → network → server).
	Delivery int `json:"delivery,omitempty"`
	// Setup marks an attempt that only sets the story up (Run.SendSetup):
	// --verbose and the pictures show it, the story does not.
	Setup bool `json:"setup,omitempty"`
	// Moved and Transfers, on a server's database event, are the money its
	// request moved and the transfers it committed, read from the ledger.
	Moved     int64   `json:"movedKobo,omitempty"`
	Transfers []int64 `json:"transfers,omitempty"`
	// Ledger, on a server's answer with Options.Snapshots, is the balances
	// line just after the request.
	Ledger string `json:"ledger,omitempty"`
}

// Kinds of Event. The story shows steps, attempts and balances; the server
// side (server, fault, send, arrive, answer, database) and the expectations
// are for --verbose and the pictures.
const (
	KindStep     = "step"     // narration (Run.Step)
	KindAttempt  = "attempt"  // what a client was told (Run.Send and friends)
	KindServer   = "server"   // what happened out of the client's sight (Run.Server)
	KindFault    = "fault"    // a fault struck (Lane, Fault)
	KindSend     = "send"     // a request leaves a client (From → To)
	KindArrive   = "arrive"   // a request reaches a server
	KindAnswer   = "answer"   // a server answers
	KindDatabase = "database" // a server's work in the database
	KindExpect   = "expect"   // an expectation, checked (OK, Source)
	KindBalances = "balances" // the ledger's line after the phase
)

// Sources of expectations: facts the lesson states, and checks that are
// bank-sim's own.
const (
	SourceLesson  = "lesson"
	SourceBankSim = "bank-sim"
)

// Expectation is one thing the story says must happen, checked. Source says
// whether the lesson states it or it is bank-sim's own check.
type Expectation struct {
	Text   string `json:"text"`
	OK     bool   `json:"ok"`
	Source string `json:"source"`
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
	// Labels are the people's names of the phase's intents ("Ada's ₦10,000
	// to Bola" for ada-pays-bola), for output meant to be read.
	Labels map[string]string `json:"labels,omitempty"`
}

// Report is the outcome of one scenario.
type Report struct {
	Scenario string        `json:"scenario"`
	Title    string        `json:"title"`
	Summary  string        `json:"summary"`
	Seed     uint64        `json:"seed,string"`
	Bug      string        `json:"bug,omitempty"`
	Changes  []Change      `json:"changes,omitempty"`
	Phases   []PhaseReport `json:"phases"`
	Passed   bool          `json:"passed"`
	Verdict  string        `json:"verdict"`
	// Duration is the run's time, without a watcher's pauses (Options.Held).
	Duration time.Duration `json:"durationNs"`
}

// Change is one way a live experiment changed the story (Options.Faults,
// Options.Amount), and how often a changed fault struck.
type Change struct {
	What  string `json:"what"`
	Fired *int   `json:"fired,omitempty"`
}

// Changed reports whether the run was a live experiment.
func (rep Report) Changed() bool { return len(rep.Changes) > 0 }

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
func Execute(ctx context.Context, s Scenario, dbs banks.Databases, seed uint64, obs Observer) (Report, error) {
	return ExecuteWith(ctx, s, dbs, seed, obs, Options{})
}

// ExecuteWith is Execute with options: a bug switched on in the protected
// phases, the controls skipped, or a live experiment (faults added, another
// amount).
func ExecuteWith(ctx context.Context, s Scenario, dbs banks.Databases, seed uint64, obs Observer, o Options) (Report, error) {
	start := time.Now()
	if o.Held != nil {
		o.heldAtStart = o.Held()
	}
	if obs == nil {
		obs = nopObserver{}
	}
	seed = SeedFor(seed, s.Name)
	rep := Report{Scenario: s.Name, Title: s.DisplayTitle(), Summary: s.Summary, Seed: seed, Passed: true}
	if o.Bug != nil {
		rep.Bug = o.Bug.Name
	}
	fired := map[string]int{}
	// The phases reset a bank to the opening state instead of cloning
	// again, and keep the pool's connections: opening a backend costs more
	// than the phase's own work. A caller that runs many scenarios passes
	// one Recycled for all of them (scenario --all), and it is used as is.
	dbs, closeDBs := banks.Recycled(dbs)
	defer closeDBs()
	var prepared any
	if s.Prepare != nil {
		var release func()
		prepared, release = s.Prepare(ctx, o)
		defer release()
	}
	obs.ScenarioStart(s, seed)
	for i, p := range s.Phases {
		if p.Control && o.SkipControls {
			continue
		}
		pr, err := runPhase(ctx, s, p, i, dbs, seed, start, obs, o, fired, prepared)
		if err != nil {
			return rep, err
		}
		rep.Phases = append(rep.Phases, pr)
		if !pr.Passed {
			rep.Passed = false
		}
		obs.PhaseEnd(pr)
	}
	rep.Changes = o.changes(s, fired)
	rep.Duration = time.Since(start) - o.heldSince()
	rep.Verdict = verdict(rep, o.changed())
	obs.ScenarioEnd(rep)
	return rep, nil
}

func verdict(rep Report, changed bool) string {
	for _, p := range rep.Phases {
		if !p.Passed {
			return fmt.Sprintf("%s: %s", p.Title, p.Verdict)
		}
	}
	if changed {
		return "changed run: the protected bank kept every invariant"
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

func runPhase(ctx context.Context, s Scenario, p Phase, index int, dbs banks.Databases, seed uint64, start time.Time, obs Observer, o Options, fired map[string]int, prepared any) (PhaseReport, error) {
	obs.PhaseStart(p, index)
	var pool *pgxpool.Pool
	if !s.OwnServers {
		db, err := dbs.NewBank(ctx, s.Name)
		if err != nil {
			return PhaseReport{}, err
		}
		defer db.Close()
		pool = db.Pool
		if !p.Control && o.Bug != nil {
			// The mistake's schema, as a chaos run opens it.
			if err := o.Bug.ApplySchema(ctx, pool); err != nil {
				return PhaseReport{}, err
			}
		}
	}

	r := &Run{
		DB:        pool,
		Seed:      seed + uint64(index)*0x9e3779b97f4a7c15,
		prepared:  prepared,
		start:     start,
		held:      o.heldSince,
		obs:       obs,
		opening:   bank.LessonAccounts,
		done:      ctx.Done(),
		amount:    s.Amount,
		faults:    o.Faults,
		snapshots: o.Snapshots,
		labels:    map[string]string{},
	}
	if o.Amount > 0 && s.Amount > 0 {
		r.amount = o.Amount
	}
	if !p.Control {
		r.bug = o.Bug
	}
	r.rng = newRand(r.Seed)
	pr := PhaseReport{Title: p.Title, Control: p.Control}

	runErr := safeRun(ctx, p, r)
	r.cleanup()
	if r.closeDB != nil {
		defer r.closeDB()
	}
	if errors.Is(runErr, postgres.ErrUnavailable) {
		// Not the story's outcome: it could not run (a pair it could not
		// start), as when the phase's bank could not be made.
		return PhaseReport{}, runErr
	}
	if r.DB == nil {
		// A story of its own servers that ended before it had a bank.
		if runErr == nil {
			runErr = errors.New("the story brought no bank of its own (Run.UseDB)")
		}
		return PhaseReport{}, runErr
	}
	for name, n := range r.fired() {
		fired[name] += n
	}

	ledger, lerr := bank.ReadLedger(ctx, r.DB)
	if lerr != nil {
		return PhaseReport{}, lerr
	}
	pr.Ledger = ledger
	pr.Balances = ledger.Line()
	r.emit(Event{Kind: KindBalances, Text: pr.Balances})
	r.mu.Lock()
	told := append([]bank.Told(nil), r.told...)
	r.mu.Unlock()
	pr.Invariants = append(bank.CheckInvariants(r.opening, ledger, told), r.extra...)
	pr.Events = r.events
	pr.Expectations = r.expectations
	pr.Labels = r.labels
	pr.Passed, pr.Verdict = judge(p, pr, runErr, o.changed())
	if runErr != nil {
		pr.Error = runErr.Error()
	}
	return pr, nil
}

// judge decides a phase. A protected phase must meet every expectation and
// keep every invariant. A control must meet its expectations (it reproduces
// the lesson's numbers) and must break at least one invariant; a control that
// breaks nothing proves nothing, and fails. In a changed run (a live
// experiment) the story's expectations no longer apply: the invariants alone
// judge the protected phases, and a control only reports what broke.
func judge(p Phase, pr PhaseReport, runErr error, changed bool) (bool, string) {
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
	if changed {
		switch {
		case p.Control && len(broken) == 0:
			return true, "without protection, nothing broke this time"
		case p.Control:
			return true, fmt.Sprintf("without protection, %s", joinAnd(broken))
		case len(broken) > 0:
			return false, fmt.Sprintf("invariant broken: %s", joinAnd(broken))
		}
		return true, fmt.Sprintf("all %d invariants hold", len(pr.Invariants))
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
