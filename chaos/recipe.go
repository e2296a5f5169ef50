package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/userfile"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/scenarios"
)

// The recipe file format.
const (
	RecipeFormat  = "bank-sim chaos recipe"
	RecipeVersion = 1
)

// Recipe is a failing chaos run written out small: the bank, the intents
// and what each attempt meets, the schedule, and the rule it breaks. Shrink
// makes one; Save writes it as JSON; a recipe replays deterministically
// (Config), and as a scenario story (Scenario), the same way every time.
type Recipe struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Violation is the rule the recipe breaks, as it broke it when shrunk.
	Violation RecipeViolation `json:"violation"`
	// Bug is the mistake it was found with; "" for the handler as it is.
	Bug string `json:"bug,omitempty"`
	// Seed draws the fencing tokens and, with PolicyRandom, the schedule.
	Seed       Seed `json:"seed"`
	Clients    int  `json:"clients"`
	Servers    int  `json:"servers"`
	Attempts   int  `json:"attempts"`
	AuditSteps int  `json:"auditSteps"`
	// Dispatchers is how many outbox dispatchers run beside the clients (3
	// when zero, as in a recipe from before they did).
	Dispatchers int `json:"dispatchers,omitempty"`
	// PipelineFaults are the side effects' faults, as the decisions that
	// fired: each fault, what it struck (an outbox row, a provider key, an
	// event) and at which of its chances there.
	PipelineFaults []outbox.Firing `json:"pipelineFaults,omitempty"`
	// Interleaving is the schedule: a policy and its preemptions.
	Interleaving *Interleaving `json:"interleaving"`
	// Script is the bank and the intents.
	Script *Script `json:"script"`
	// From and To are the failing run's size and the recipe's; Runs is how
	// many runs shrinking took.
	From sizes `json:"from"`
	To   sizes `json:"to"`
	Runs int   `json:"runs"`
}

// RecipeViolation is the rule a recipe breaks.
type RecipeViolation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	Intent int    `json:"intent"`
}

// Config is the deterministic run the recipe describes. bug, when set,
// replaces the recipe's own mistake (nil: the recipe's).
func (r *Recipe) Config(bug *mistakes.Bug) Config {
	if bug == nil && r.Bug != "" {
		if b, err := mistakes.Lookup(r.Bug); err == nil {
			bug = &b
		}
	}
	rates := Rates{}
	for _, in := range r.Script.Intents {
		for _, a := range in.Attempts {
			if a.Fault != "" {
				rates[a.Fault] = 1
			}
		}
	}
	return Config{Seed: uint64(r.Seed), Clients: r.Clients, Instances: r.Servers, MaxAttempts: r.Attempts, Faults: rates,
		Bug: bug, Deterministic: true, Interleaving: r.Interleaving, AuditSteps: r.AuditSteps, Script: r.Script,
		Dispatchers: r.Dispatchers, PipelineFaults: r.PipelineFaults}.WithDefaults()
}

// Save writes the recipe as indented JSON, through a temporary file and a
// rename: never half a recipe.
func (r *Recipe) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".recipe-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// maxRecipe bounds a recipe file: a shrunk run's script, interleaving and
// history, far below this.
const maxRecipe = 16 << 20

// LoadRecipe reads a recipe saved by Save, and says what is wrong with one
// it cannot replay.
func LoadRecipe(path string) (*Recipe, error) {
	// A recipe is a shrunk run: a few KiB. Reading one is never long, so
	// it needs no context.
	b, err := userfile.Read(context.Background(), path, maxRecipe, "a recipe written by 'bank-sim chaos --shrink --save-recipe FILE'")
	if err != nil {
		return nil, err
	}
	var r Recipe
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%s is not a bank-sim recipe: %w", path, err)
	}
	if r.Format != RecipeFormat {
		return nil, fmt.Errorf("%s is not a bank-sim recipe (its format is %q, not %q)", path, r.Format, RecipeFormat)
	}
	if r.Version != RecipeVersion {
		return nil, fmt.Errorf("%s is a recipe of version %d; this bank-sim reads version %d", path, r.Version, RecipeVersion)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Validate says what makes the recipe impossible to replay.
func (r *Recipe) Validate() error {
	switch {
	case r.Script == nil:
		return errors.New("the recipe has no script")
	case r.Clients < 1 || r.Clients > 256:
		return fmt.Errorf("clients %d: give 1 to 256", r.Clients)
	case r.Servers < 1 || r.Servers > 64:
		return fmt.Errorf("servers %d: give 1 to 64", r.Servers)
	case r.Attempts < 1 || r.Attempts > 100:
		return fmt.Errorf("attempts %d: give 1 to 100", r.Attempts)
	case r.Dispatchers < 0 || r.Dispatchers > 16:
		return fmt.Errorf("dispatchers %d: give 1 to 16", r.Dispatchers)
	}
	for _, f := range r.PipelineFaults {
		if !sideEffectFault(f.Fault) {
			return fmt.Errorf("pipeline fault %q: not one of the side effects' faults (%s)", f.Fault, strings.Join(outbox.PipelineFaults(), ", "))
		}
		if f.N < 0 {
			return fmt.Errorf("pipeline fault %s on %q: chance %d is negative", f.Fault, f.On, f.N)
		}
	}
	known := false
	for _, k := range Kinds() {
		known = known || k == r.Violation.Kind
	}
	if !known {
		return fmt.Errorf("unknown violation kind %q; known: %s", r.Violation.Kind, strings.Join(Kinds(), ", "))
	}
	if r.Bug != "" {
		if _, err := mistakes.Lookup(r.Bug); err != nil {
			return err
		}
	}
	return r.Config(nil).Validate()
}

// Text is the recipe as a person reads it: the rule broken, the bank, the
// intents and their faults, the schedule.
func (r *Recipe) Text() string {
	var b strings.Builder
	with := "the handler as it is"
	if r.Bug != "" {
		with = "the mistake " + r.Bug
	}
	fmt.Fprintf(&b, "Recipe: %s with %s\n", r.Violation.Kind, with)
	fmt.Fprintf(&b, "  shrunk from %s to %s, in %d runs\n", r.From, r.To, r.Runs)
	fmt.Fprintf(&b, "\nThe bank (seed %d)\n", uint64(r.Seed))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, a := range r.Script.Opening {
		fmt.Fprintf(tw, "  account %d\tuser %d\t%s\t%s\n", a.ID, a.OwnerID, a.Status, bank.Naira(a.BalanceKobo))
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "  %s\n", describeServers(r.Servers))
	fmt.Fprintf(&b, "  %s, each sending its next intent once the last has its final answer; up to %s per intent, then healing%s\n",
		plural(r.Clients, "client", "clients"), plural(r.Attempts, "attempt", "attempts"), auditText(r.AuditSteps))
	fmt.Fprintf(&b, "  %s\n", pipelineText(r.Dispatchers, r.PipelineFaults))
	fmt.Fprintf(&b, "\nThe intents\n")
	for _, in := range r.Script.Intents {
		fmt.Fprintf(&b, "  %s: user %d sends %s from account %d to account %d, key %s", in.Label, in.UserID,
			bank.Naira(in.Request.AmountKobo), in.Request.From, in.Request.To, in.Key)
		switch {
		case in.Reuse != "":
			fmt.Fprintf(&b, "\n     a buggy client reusing intent-%d's key with another %s", in.ReuseOf, in.Reuse)
		case in.Follower:
			fmt.Fprintf(&b, "\n     another user, the same key text as the intent before it")
		}
		b.WriteString("\n")
		for n, a := range in.Attempts {
			fmt.Fprintf(&b, "     attempt %d → server %d", n+1, a.Server+1)
			if a.Fault != "" {
				fmt.Fprintf(&b, ": %s (%s)", a.Fault, faultText(a))
			}
			b.WriteString("\n")
		}
		if n := len(in.Attempts); n > 0 {
			fmt.Fprintf(&b, "     every later attempt (retries, healing, repeats) → server %d, no fault\n", in.Attempts[n-1].Server+1)
		}
		if in.Repeat {
			b.WriteString("     then sent once more after its final answer\n")
		}
		if in.AfterCleanup {
			b.WriteString("     and once more after the cleanup job\n")
		}
	}
	if len(r.PipelineFaults) > 0 {
		fmt.Fprintf(&b, "\nThe side effects' faults\n")
		for _, f := range r.PipelineFaults {
			fmt.Fprintf(&b, "  %s\n", firingText(f))
		}
	}
	fmt.Fprintf(&b, "\nThe schedule\n  %s\n", scheduleText(r.Interleaving))
	if r.Interleaving != nil {
		for i, p := range r.Interleaving.Preemptions {
			fmt.Fprintf(&b, "  %d. %s\n", i+1, p)
		}
	}
	fmt.Fprintf(&b, "\nThe violation\n  %s: %s\n", r.Violation.Kind, r.Violation.Detail)
	return b.String()
}

func (z sizes) String() string {
	s := fmt.Sprintf("%s, %s, %s, %s", plural(z.Intents, "intent", "intents"), plural(z.Clients, "client", "clients"),
		plural(z.Faults, "fault", "faults"), plural(z.Servers, "server", "servers"))
	if z.Preemptions > 0 || z.Steps > 0 {
		s += fmt.Sprintf(", %s", plural(z.Steps, "step", "steps"))
	}
	if z.Preemptions > 0 {
		s += fmt.Sprintf(", %s", plural(z.Preemptions, "preemption", "preemptions"))
	}
	return s
}

// String is a preemption as a person reads it.
func (p Preemption) String() string {
	nth := ""
	if p.N > 1 {
		nth = fmt.Sprintf(" (the %s time)", ordinal(p.N))
	}
	switch p.How {
	case "before":
		return fmt.Sprintf("when %s is about to %q%s, %s runs instead", p.Task, p.Step, nth, p.Run)
	case "done":
		return fmt.Sprintf("when %s has finished, %s runs", p.Task, p.Run)
	}
	return fmt.Sprintf("when %s %s %q%s, %s runs", p.Task, p.How, p.Step, nth, p.Run)
}

func ordinal(n int) string {
	switch n % 10 {
	case 1:
		if n%100 != 11 {
			return fmt.Sprintf("%dst", n)
		}
	case 2:
		if n%100 != 12 {
			return fmt.Sprintf("%dnd", n)
		}
	case 3:
		if n%100 != 13 {
			return fmt.Sprintf("%drd", n)
		}
	}
	return fmt.Sprintf("%dth", n)
}

func scheduleText(il *Interleaving) string {
	if il == nil || il.Policy == PolicyRandom || il.Policy == "" {
		return "the seed's random choice of the next task, at every step"
	}
	if len(il.Preemptions) == 0 {
		return "each task runs until it must wait; then the ready task that started first (no preemption)"
	}
	return "each task runs until it must wait; then the ready task that started first; except:"
}

func auditText(steps int) string {
	if steps < 0 {
		return "; no auditor"
	}
	if steps == 0 {
		steps = DefaultAuditSteps
	}
	return fmt.Sprintf("; the auditor reads every balance each %d steps", steps)
}

// describeServers says how the copies of the server differ.
func describeServers(n int) string {
	if n == 1 {
		return "1 server"
	}
	var notes []string
	for k := range n {
		switch skew := appClockSkew(k); {
		case skew < 0:
			notes = append(notes, fmt.Sprintf("server %d's own clock runs %s behind", k+1, -skew))
		case skew > 0:
			notes = append(notes, fmt.Sprintf("server %d's %s ahead", k+1, skew))
		}
	}
	notes = append(notes, fmt.Sprintf("server %d waits for a key in progress instead of answering 409", n))
	return fmt.Sprintf("%d servers on one database (%s)", n, strings.Join(notes, "; "))
}

// faultText says what a fault does to the attempt.
func faultText(a ScriptAttempt) string {
	switch a.Fault {
	case FaultLoseResponse:
		return "the server answers; the answer is lost"
	case FaultDropRequest:
		return "the request never reaches the server"
	case FaultDuplicate:
		return "two copies arrive at the same moment"
	case FaultCrashAfterClaim:
		return "the server claims the key and stops; it is woken during healing"
	case FaultFailBeforeCommit:
		return "the transaction breaks just before COMMIT; 500"
	case FaultLate:
		return "the request reaches the server after the client gave up"
	case FaultSlow:
		return "the server is slow, but answers"
	case FaultClockJump:
		return "the clock jumps past the lock's TTL first"
	case FaultDeadlock:
		return "another transaction locks the key row and waits for the sender's"
	case FaultExpireMidWrite:
		return "the lock expires while the holder writes; a retry on another server takes the key over"
	case FaultDisconnect:
		return "the client goes away " + a.Disconnect.String()
	case FaultFreeze:
		return "an administrator freezes the sender between the transfer's checks and its debit"
	}
	return a.Fault
}

// pipelineText says what drains the outbox beside the clients.
func pipelineText(dispatchers int, fire []outbox.Firing) string {
	if dispatchers <= 0 {
		dispatchers = 3
	}
	s := fmt.Sprintf("%s and a consumer drain the outbox beside the clients, then once more after healing", plural(dispatchers, "dispatcher", "dispatchers"))
	if len(fire) == 0 {
		s += ", no fault"
	}
	return s
}

// firingText says what a side-effect fault did, and where.
func firingText(f outbox.Firing) string {
	nth := fmt.Sprintf("at its %s chance there", ordinal(f.N+1))
	switch f.Fault {
	case outbox.FaultDispatcherCrash:
		return fmt.Sprintf("dispatcher-crash on outbox row %s, %s: the dispatcher sends it and dies before marking it done", f.On, nth)
	case outbox.FaultDispatcherPause:
		return fmt.Sprintf("dispatcher-pause on the batch starting at outbox row %s, %s: the dispatcher stalls past its lease", f.On, nth)
	case outbox.FaultProviderTimeout:
		on := "the SMS with key " + f.On
		if f.On == "" {
			on = "an SMS sent without a key"
		} else if f.N > 0 {
			// A key's later chances are its re-sends: the provider knows it.
			return fmt.Sprintf("provider-timeout on a re-send of the SMS with key %s, %s: the provider sends nothing new and its answer is lost", f.On, nth)
		}
		return fmt.Sprintf("provider-timeout on %s, %s: the provider accepts it and its answer is lost", on, nth)
	case outbox.FaultConsumerCrash:
		return fmt.Sprintf("consumer-crash on event %s, %s: the consumer dies after a commit of its own and before its offset commit (or the offset first, in the order its code takes them; and between the effect and the processed-events marker, when its code commits them apart)", f.On, nth)
	}
	return fmt.Sprintf("%s on %s, %s", f.Fault, f.On, nth)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Scenario is the recipe as a story of the scenario suite. With a mistake,
// it has two phases: the mistake's, a control that must break the recipe's
// rule (as scenarios' unprotected phases must break one), and the correct
// handler's, which must keep every rule. A recipe found with the handler as
// it is has only the second: it fails until the handler is fixed. A phase's
// Bug (scenario --bug) replaces the correct handler; bug is its name ("" for
// none), so that the second phase is titled by what runs in it.
func (r *Recipe) Scenario(name, bug string) scenarios.Scenario {
	s := scenarios.Scenario{Name: name,
		Summary: fmt.Sprintf("a shrunk chaos run: %s, %s", plural(len(r.Script.Intents), "intent", "intents"), r.Violation.Kind)}
	if r.Bug != "" {
		bug, _ := mistakes.Lookup(r.Bug)
		s.Phases = append(s.Phases, scenarios.Phase{
			Title:   fmt.Sprintf("With the mistake %s, the recipe breaks “%s” again", r.Bug, CheckTitle(r.Violation.Kind)),
			Control: true,
			Run:     func(ctx context.Context, run *scenarios.Run) error { return r.replay(ctx, run, &bug, true) },
		})
	}
	title := "With the correct handler, every rule holds"
	switch {
	case bug != "":
		title = fmt.Sprintf("With the mistake %s (--bug), every rule holds", bug)
	case r.Bug == "":
		title = "With the handler as it is, every rule holds"
	}
	s.Phases = append(s.Phases, scenarios.Phase{Title: title,
		Run: func(ctx context.Context, run *scenarios.Run) error { return r.replay(ctx, run, run.Bug(), false) }})
	return s
}

// noBug is the correct handler, for Config: nil means the recipe's own.
var noBug = &mistakes.Bug{Name: ""}

// replay runs the recipe on the phase's bank and tells it: each intent,
// each attempt and what its client was told; then every chaos check is one
// of the phase's invariants.
func (r *Recipe) replay(ctx context.Context, run *scenarios.Run, bug *mistakes.Bug, control bool) error {
	if bug == nil {
		bug = noBug
	}
	cfg := r.Config(bug)
	if bug == noBug {
		cfg.Bug = nil
	}
	run.Open(r.Script.Opening)
	pool, err := PoolFor(ctx, run.DB, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	h, err := RunWith(ctx, pool, cfg, Options{})
	if err != nil {
		return err
	}
	for _, in := range h.Intents {
		run.Step("%s: user %d sends %s from account %d to account %d", in.Label, in.UserID, bank.Naira(in.Request.AmountKobo), in.Request.From, in.Request.To)
		for _, a := range in.Attempts {
			what := a.Error
			if a.Status != 0 {
				what = describeAnswer(a.Response())
			}
			fault := ""
			if a.Fault != "" {
				sa := ScriptAttempt{Fault: a.Fault}
				if sc, ok := cfg.Script.attempt(in.Index, a.N); ok {
					sa = sc
				}
				fault = ", " + a.Fault + ": " + faultText(sa)
			}
			where := fmt.Sprintf("server %d", a.Instance+1)
			if a.Phase != PhaseFault {
				where = a.Phase + ", " + where // healing, a repeat
			}
			run.Step("  attempt %d (%s%s): %s", a.N, where, fault, what)
			if a.Seen != SeenUnknown {
				run.Told(bank.Told{Intent: in.Label, UserID: in.UserID, Request: in.Request, Response: a.Response()})
			}
		}
	}
	for _, f := range h.PipelineFaults {
		run.Step("side effects: %s", firingText(f))
	}
	for _, st := range h.Stalls {
		run.Server("stalled: %s", st)
	}
	res := Check(h)
	for _, c := range res.Checks {
		if storyChecks[c.Kind] {
			continue // the story checks these itself, from the ledger
		}
		ok, detail := true, fmt.Sprintf("no violation in %s", plural(len(h.Intents), "intent", "intents"))
		for _, v := range res.Violations {
			if v.Kind == c.Kind {
				ok, detail = false, v.Detail
				break
			}
		}
		run.Invariant(CheckTitle(c.Kind), ok, detail)
	}
	if control {
		run.Expect(res.ByKind[r.Violation.Kind] > 0, "the recipe breaks “%s”, as when it was found", CheckTitle(r.Violation.Kind))
	}
	return nil
}

// storyChecks are the chaos checks that every story's own invariants make
// already, from the ledger at the end: the total, no negative balance, no
// intent twice, each balance from the transfers. (The audits' totals, taken
// mid-run, stay a check of their own.)
var storyChecks = map[string]bool{KindNegative: true, KindTwice: true, KindLedger: true}

// describeAnswer is an answer as a story prints it.
func describeAnswer(resp bank.Response) string {
	s := resp.Summary()
	if rc, ok := resp.Receipt(); ok {
		s += fmt.Sprintf(" (%s from %d to %d, leaving %s)", bank.Naira(rc.AmountKobo), rc.From, rc.To, bank.Naira(rc.BalanceKobo))
	}
	return s
}
