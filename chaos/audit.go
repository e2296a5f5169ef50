package chaos

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/scenarios"
)

// CleanRow is the audit's name for the unmodified handler.
const CleanRow = "(none)"

// ChaosColumn is the audit's name for the chaos run's column.
const ChaosColumn = "chaos"

// AuditConfig is one audit.
type AuditConfig struct {
	Seed uint64
	// Chaos is the short chaos run each bug meets; its Seed and Bug are set
	// by the audit.
	Chaos Config
	// Parallel is how many scenario or chaos runs go at once.
	Parallel int
	// Done, when set, is told each time a cell of the matrix is filled.
	Done func(done, total int)
	// FirstCatch fills, for each mistake, only the cells it takes to catch
	// it: the scenarios in order until one catches it, then the chaos run
	// only when none did. The correct handler still meets every check. A
	// cell left out is absent from its row's Caught. It answers "is every
	// mistake caught?" in a fraction of the time; the whole matrix answers
	// "by what?".
	FirstCatch bool
	// Off are the chaos checker's rules switched off (kinds): the chaos
	// column judges its runs without them (CheckWithout), to show which
	// mistakes a rule alone catches.
	Off []string
	// Only, when set, limits the audit to those mistakes' rows (names in
	// mistakes.All), and the correct handler's row is not run: a test of
	// what one mistake needs runs that mistake alone.
	Only []string
}

// AuditRow is one bug (or the clean handler) against every check.
type AuditRow struct {
	Bug     string `json:"bug"`
	Mistake string `json:"mistake,omitempty"`
	// Caught maps each column (a scenario, or "chaos") to whether it caught
	// the bug: a protected phase failed, or the checker found a violation.
	Caught map[string]bool `json:"caught"`
	// Why holds, for each catching column, the first thing that broke.
	Why map[string]string `json:"why,omitempty"`
	// Missing is what the row's chaos run never exercised (see
	// Coverage.Missing); for the correct handler, what its chaos runs
	// together never exercised (see AuditCoverageRuns). A chaos column that
	// missed a defence proves nothing about it.
	Missing []string `json:"missing,omitempty"`
	// Seeds are the seeds of the row's chaos runs: the audit's, and for the
	// correct handler the next ones it took to reach every defence.
	Seeds []Seed `json:"seeds,omitempty"`
	// Broken are the rules the chaos run that caught the row broke, in
	// Kinds' order.
	Broken []string `json:"broken,omitempty"`
	// Silenced are the rules switched off (AuditConfig.Off) that the row's
	// chaos runs broke, any of them, in Kinds' order: with them on, it
	// would have been caught by them.
	Silenced []string `json:"silenced,omitempty"`
}

// Any reports whether some column caught the row's bug.
func (r AuditRow) Any() bool {
	for _, c := range r.Caught {
		if c {
			return true
		}
	}
	return false
}

// AuditReport is the matrix: bugs × checks.
type AuditReport struct {
	Seed    uint64     `json:"seed,string"` // a string: JavaScript and jq round numbers above 2^53
	Columns []string   `json:"columns"`
	Clean   AuditRow   `json:"clean"`
	Rows    []AuditRow `json:"rows"`
	// Off are the rules the chaos runs were judged without (AuditConfig.Off).
	Off []string `json:"off,omitempty"`
}

// KillRatio is the share of bugs that at least one check caught.
func (r AuditReport) KillRatio() (caught, total int) {
	for _, row := range r.Rows {
		if row.Any() {
			caught++
		}
	}
	return caught, len(r.Rows)
}

// Verdict is the audit's: INVALID when a bug went uncaught or the correct
// handler was caught (a false alarm); otherwise INCONCLUSIVE when the
// correct handler's chaos runs, all AuditCoverageRuns of them, together
// never reached some defence path (the chaos column cannot vouch for it);
// VALID when they did. A run that happened not to reach a rare path does not
// make the audit fail: the next seed's run may reach it.
func (r AuditReport) Verdict() string {
	caught, total := r.KillRatio()
	switch {
	case caught < total || r.Clean.Any():
		return Invalid
	case len(r.Clean.Missing) > 0:
		return Inconclusive
	}
	return Valid
}

// Alone maps each rule of the chaos checker (Kinds) to the mistakes that
// rule alone catches: no scenario caught them, and their chaos run broke
// that rule and no other. Switched off, such a rule lets them through. A
// rule with none is listed with none: no built-in mistake needs it.
func (r AuditReport) Alone() map[string][]string {
	out := map[string][]string{}
	for _, k := range Kinds() {
		out[k] = nil
	}
	for _, row := range r.Rows {
		if len(row.Broken) != 1 || !row.Caught[ChaosColumn] {
			continue
		}
		scenario := false
		for c, caught := range row.Caught {
			scenario = scenario || caught && c != ChaosColumn
		}
		if !scenario {
			out[row.Broken[0]] = append(out[row.Broken[0]], row.Bug)
		}
	}
	return out
}

// AloneNote says, for a rule of the chaos checker that no built-in mistake
// needs alone on every seed, why, and which rule backs it up; "" for the
// others.
func AloneNote(kind string) string {
	switch kind {
	case KindTotal:
		return "implied at the end by " + KindLedger + ": the transfers' rows move as much into accounts as out of them, " +
			"so a final total that is not the opening one leaves some balance off its opening plus credits minus debits; " +
			"it is alone only in a mid-run audit (every 25 ms of a free run, every 500 scheduler steps of a deterministic one), " +
			"for money moved in two commits that both land. own-credit-in-second-transaction does that (a move between one customer's own accounts " +
			"credited in a transaction of its own after the transfer's), and breaks it alone when an audit falls between the two commits: " +
			"in the deterministic runs of 100 intents of seeds 42, 43 and 45 (1 or 2 audits short), not of seed 44, " +
			"and in every free run of 400 measured (seeds 42 and 20261130, two each); a run none of whose audits falls between a move's two commits misses it"
	case KindKeyLost:
		return "refusal-in-second-transaction breaks it alone in some runs (the deterministic runs of 100 intents of seeds 42 to 45; free runs of 400 intents differ from one run to the next: " +
			"audit --seed 42's broke " + KindRejected + " too, --seed 20261130's " + KindReplay + " and " + KindRejected + "); " +
			"on others an intent whose key it lost is sent again (a second tap, a repeat after the cleanup), " +
			"runs again, and " + KindReplay + " (and " + KindRejected + " when it then moves money) back it up"
	case KindTwice:
		return "new-key-after-5xx breaks it alone in some runs (the deterministic runs of 100 intents of seeds 42, 43 and 45); " +
			"on others the client's new key is refused for want of the money the first request moved, and " + KindRejected +
			" backs it up (with " + KindWrong + " when the sender is a solo account sending its whole balance)"
	case KindOutboxLeft:
		return "give-up-on-same-error (a row given up at its second failed send, for the same error as its last) breaks it alone in some runs only: " +
			"it needs an SMS whose provider loses its answer twice, to its first send and to a re-send (each chance drawn apart, outbox.Pipeline's fires): " +
			"seed 42's deterministic run of 100 intents has one (row 91), as 9 of seeds 1 to 20's do, not seeds 43 to 45's; " +
			"audit --seed 42's free run of 400 has one, --seed 20261130's none (the next seed's has); a run with none misses it. " +
			"Only a row given up after its message went out once is alone: one given up before breaks " + KindSMSNotOnce + " or " + KindEventLost + " too"
	case KindNegative:
		return "alone only where the accounts table leaves the floor to the application: bank-sim's own has CHECK (balance_kobo >= 0), " +
			"which turns an overdraw into a 500 on every attempt (" + KindUnresolved + " sees own-accounts-unchecked). " +
			"no-balance-floor drops that CHECK and checks a move between one customer's own accounts on the balance read as its request arrived, " +
			"debiting without the condition: it breaks the rule alone when a debit of the sender commits between that read and the move's row lock " +
			"and an audit (or the end) sees the balance before a credit lifts it: in the deterministic runs of 100 intents of seeds 43 and 44, " +
			"not of seeds 42 and 45, and in 4 of 4 free runs of 400 measured (seeds 42 and 20261130, two each); a run that meets no such race, or none " +
			"an audit sees, misses it (the audit's cell then goes on to the next seed). A deterministic hole would not do: a solo account sending " +
			"a kobo more than it holds to its owner's other account (seed 42's free 400: intents 190 and 384) would be told 201, and " + KindWrong +
			" knows its answer"
	}
	return ""
}

// Passed reports whether every bug was caught, the clean handler by none,
// and the clean handler's chaos runs together exercised every defence.
func (r AuditReport) Passed() bool { return r.Verdict() == Valid }

// AuditCoverageRuns bounds the correct handler's chaos runs in an audit. A
// run on the audit's seed that breaks no rule but never reached some rare
// defence path (a wait on a key in progress, a fencing rollback) is followed
// by a run on the next seed, and so on, until the runs together have reached
// every path: at most this many runs in all, so that an audit stays short
// and its seeds repeat it.
const AuditCoverageRuns = 4

// AuditIntents is the default length of the audit's chaos runs: with
// AuditRates, enough to take every defence path.
const AuditIntents = 400

// Audit runs the clean handler and every bug in mistakes.All against the
// protected phases of every scenario and a short chaos run.
func Audit(ctx context.Context, dbs banks.Databases, cfg AuditConfig) (AuditReport, error) {
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Chaos.Intents <= 0 && cfg.Chaos.Duration <= 0 {
		cfg.Chaos.Intents = AuditIntents
	}
	if cfg.Chaos.Faults == nil {
		cfg.Chaos.Faults = AuditRates()
	}
	if cfg.Chaos.Clients <= 0 {
		cfg.Chaos.Clients = 8
	}
	dbs, closeDBs := banks.Recycled(dbs)
	defer closeDBs()
	// The chaos cells' pools outlive their runs, as a campaign's do: a run
	// on a pool of its own forked a backend for each of its connections.
	pools := newPoolCache(cfg.Parallel)
	defer pools.close()
	list := scenarios.List()
	rep := AuditReport{Seed: cfg.Seed, Off: cfg.Off}
	for _, s := range list {
		rep.Columns = append(rep.Columns, s.Name)
	}
	rep.Columns = append(rep.Columns, ChaosColumn)

	bugs := mistakes.All()
	if len(cfg.Only) > 0 {
		var only []mistakes.Bug
		for _, b := range bugs {
			if slices.Contains(cfg.Only, b.Name) {
				only = append(only, b)
			}
		}
		if len(only) != len(cfg.Only) {
			return rep, fmt.Errorf("audit: Only names %v, of which the catalogue has %d", cfg.Only, len(only))
		}
		bugs = only
	}
	rows := make([]AuditRow, len(bugs)+1)
	rows[0] = AuditRow{Bug: CleanRow, Caught: map[string]bool{}, Why: map[string]string{}}
	for i, b := range bugs {
		rows[i+1] = AuditRow{Bug: b.Name, Mistake: b.Mistake, Caught: map[string]bool{}, Why: map[string]string{}}
	}

	// A job is a row's cells, filled in order; under FirstCatch a mistake's
	// row is one job that stops at its first catch (the scenarios come
	// first, the chaos run last), the others one job a cell.
	type job struct {
		row     int
		columns []string
	}
	var jobs []job
	for r := range rows {
		if r == 0 && len(cfg.Only) > 0 {
			continue
		}
		if cfg.FirstCatch && r > 0 {
			jobs = append(jobs, job{r, rep.Columns})
			continue
		}
		for _, c := range rep.Columns {
			jobs = append(jobs, job{r, []string{c}})
		}
	}
	var mu sync.Mutex
	var firstErr error
	done, total := 0, len(rows)*len(rep.Columns)
	if len(cfg.Only) > 0 {
		total -= len(rep.Columns)
	}
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		var bug *mistakes.Bug
		if j.row > 0 {
			bug = &bugs[j.row-1]
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for i, column := range j.columns {
				caught, why, missing, seeds, broken, silenced, err := cell(ctx, dbs, pools, cfg, bug, column)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("audit %s × %s: %w", rows[j.row].Bug, column, err)
					}
					mu.Unlock()
					return
				}
				rows[j.row].Caught[column] = caught
				if column == ChaosColumn {
					rows[j.row].Missing, rows[j.row].Seeds, rows[j.row].Broken = missing, seeds, broken
					rows[j.row].Silenced = silenced
				}
				if caught {
					rows[j.row].Why[column] = why
					total -= len(j.columns) - i - 1 // the cells a first catch leaves out
				}
				done++
				if cfg.Done != nil {
					cfg.Done(done, total)
				}
				mu.Unlock()
				if caught {
					break
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return rep, firstErr
	}
	rep.Clean = rows[0]
	rep.Rows = rows[1:]
	sort.Slice(rep.Rows, func(a, b int) bool { return rep.Rows[a].Bug < rep.Rows[b].Bug })
	return rep, nil
}

// cell runs one check with one bug (nil: the clean handler); for the chaos
// column it also says what the runs never exercised, their seeds, the rules
// the run that caught the bug broke, and the rules switched off that its
// runs broke.
func cell(ctx context.Context, dbs banks.Databases, pools *poolCache, cfg AuditConfig, bug *mistakes.Bug, column string) (caught bool, why string, missing []string, seeds []Seed, broken, silenced []string, err error) {
	if column == ChaosColumn {
		var last Result
		run := func(seed uint64) (Result, error) {
			c := cfg.Chaos
			c.Seed, c.Bug = seed, bug
			h, err := RunOnWith(ctx, dbs, c, Options{pools: pools})
			if err != nil {
				return Result{}, err
			}
			last = CheckWithout(h, cfg.Off)
			if len(cfg.Off) > 0 {
				// Over every run of the cell: the first seed's run may be
				// the one that met the mistake's path.
				all := Check(h)
				var now []string
				for _, k := range Kinds() {
					if slices.Contains(silenced, k) || all.ByKind[k] > 0 && slices.Contains(cfg.Off, k) {
						now = append(now, k)
					}
				}
				silenced = now
			}
			return last, nil
		}
		caught, why, missing, seeds, err = chaosCell(cfg.Seed, AuditCoverageRuns, bug != nil, run)
		if caught {
			for _, k := range Kinds() {
				if last.ByKind[k] > 0 {
					broken = append(broken, k)
				}
			}
		}
		return caught, why, missing, seeds, broken, silenced, err
	}
	s, ok := scenarios.Get(column)
	if !ok {
		return false, "", nil, nil, nil, nil, fmt.Errorf("no scenario %s", column)
	}
	rep, err := scenarios.ExecuteWith(ctx, s, dbs, cfg.Seed, nil, scenarios.Options{Bug: bug, SkipControls: true})
	if err != nil {
		return false, "", nil, nil, nil, nil, err
	}
	if !rep.Caught() {
		return false, "", nil, nil, nil, nil, nil
	}
	return true, rep.Verdict, nil, nil, nil, nil, nil
}

// chaosCell is the chaos column of one row: run on seed, and while the runs
// so far broke no rule but together never reached some defence path, on the
// next seed, up to runs runs in all. The first violation catches the row;
// missing is what the runs together never exercised.
//
// A mistake's row (mistake) goes on to the next seed while no run has
// caught it, covered or not: a mistake on a rare path (a fault before the
// COMMIT of a refusal's first attempt, say) may meet no such moment in one
// free run of a seed that reaches every defence, and is then given the
// chances the correct handler's column has, on seeds the report lists.
func chaosCell(seed uint64, runs int, mistake bool, run func(seed uint64) (Result, error)) (caught bool, why string, missing []string, seeds []Seed, err error) {
	var union Coverage
	for i := range max(runs, 1) {
		s := seed + uint64(i) // wraps past 2^64-1 to 0: still a seed
		res, err := run(s)
		if err != nil {
			return false, "", nil, seeds, err
		}
		seeds = append(seeds, Seed(s))
		if !res.Valid() {
			why := fmt.Sprintf("%s: %s", res.First.Kind, res.First.Detail)
			if i > 0 {
				why = fmt.Sprintf("seed %d: %s", s, why)
			}
			return true, why, res.Coverage.Missing(), seeds, nil
		}
		union = Union(union, res.Coverage)
		if union.Complete() && !mistake {
			break
		}
	}
	return false, "", union.Missing(), seeds, nil
}

// RunOn runs cfg on a fresh bank from dbs, with a pool sized for its
// clients, and drops the bank afterwards.
func RunOn(ctx context.Context, dbs banks.Databases, cfg Config, progress Progress) (*History, error) {
	return RunOnWith(ctx, dbs, cfg, Options{Progress: progress})
}

// RunOnWith is RunOn with options.
func RunOnWith(ctx context.Context, dbs banks.Databases, cfg Config, opts Options) (*History, error) {
	cfg = cfg.WithDefaults()
	db, err := dbs.NewBank(ctx, "chaos")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if opts.pools != nil {
		pool, err := opts.pools.get(ctx, db, cfg)
		if err != nil {
			return nil, err
		}
		h, err := RunWith(ctx, pool, cfg, opts)
		if err != nil {
			opts.pools.drop(db) // its connections may be dead or mid-transaction
		} else {
			opts.pools.put(db)
		}
		return h, err
	}
	pool, err := PoolFor(ctx, db.Pool, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	return RunWith(ctx, pool, cfg, opts)
}
