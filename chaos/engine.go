package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/jackc/pgx/v5"
)

// HealAttempts bounds how often healing retries one unknown intent.
const HealAttempts = 30

// lateBy is how long a FaultLate request waits before it reaches the server,
// long after its client has given up and, usually, retried.
const lateBy = 3 * time.Millisecond

// Bounds on every wait of a run, so that a handler that hangs fails the run
// with a sentence saying what never came, instead of hanging it.
const (
	// attemptTimeout bounds one delivery to a server: no correct handler
	// takes a fraction of it.
	attemptTimeout = 30 * time.Second
	// stageTimeout bounds the wait of a staged race for its other side (the
	// transaction that deadlocks).
	stageTimeout = 10 * time.Second
	// takeoverWait bounds the wait of a holder whose lock expired mid-write
	// for the retry to take its key over: a few statements, milliseconds for
	// a correct handler. The holder waits holding its rows, and a handler
	// that never takes the key over (keys in memory) queues behind them, so
	// the bound is short: the race then simply does not happen (a stall).
	takeoverWait = 500 * time.Millisecond
	// drainTimeout bounds the wait, before healing, for requests still on
	// their way (late ones, staged takeovers, deadlocking transactions).
	drainTimeout = time.Minute
)

// The wait policy's settings on the server copy that waits instead of
// answering 409 at once. The deterministic engine counts the wait in
// pauses (25 polls; its holders run when scheduled). A run in real time
// gives the holder longer: on a loaded machine (CI's exhaustive run, load
// 15) a holder took more than 25 ms, every waiting copy gave up with 409,
// and wait-then-replay went unreached. A holder that never finishes (its
// server crashed after the claim) costs the waiting copy this much once.
const (
	waitInterval     = time.Millisecond
	waitTimeout      = 25 * time.Millisecond
	realWaitInterval = 2 * time.Millisecond
	realWaitTimeout  = 400 * time.Millisecond
)

// Progress is told how many intents have settled their fault phase.
type Progress func(done, total int)

// Run runs a chaos run on db, a fresh bank that Run fills with its own
// accounts, and returns the history. The error is for a run that could not
// happen (the database failed), never for a violation: check the history.
func Run(ctx context.Context, db bank.DB, cfg Config, progress Progress) (*History, error) {
	return RunWith(ctx, db, cfg, Options{Progress: progress})
}

// Options are a run's ties to the world outside the bank.
type Options struct {
	// Progress, when set, is told how many intents have settled.
	Progress Progress
	// CrashPostgres kills the PostgreSQL server under db with SIGKILL and
	// starts it again on the same data, returning once it accepts
	// connections (postgres.Server.Crash). Config.KillPostgres needs it.
	CrashPostgres func(ctx context.Context) error
	// Decisions, when set, is told every choice of a deterministic run's
	// scheduler, in order.
	Decisions func(Decision)
	// Hosts, when set, places each server copy of an HTTP run (one per
	// Config.Instances): its own way to the database and its own listener.
	// faults/netns puts each copy in a network namespace of its own, so a
	// partition can cut it off from PostgreSQL. The run's own reads (the
	// auditor, the pipeline, the ledger) keep db.
	Hosts []Host
	// Began, when set, is told the moment the history's offsets (every
	// …Ns) count from, as the run starts: what happens outside the run
	// (a failover the team causes) is placed on the same time line.
	Began func(start time.Time)
	// Outages says the database may be unreachable for a while in the
	// middle of the run, by no doing of the run's (a cluster that fails
	// over): the auditor skips a snapshot it cannot take, as during a
	// crash, instead of ending the run.
	Outages bool
	// OutageWait, with Outages, is how long the database may stay
	// unwritable before the run gives up (moving the database's clock
	// keeps trying that long); 0 keeps the clock's own 15 s.
	OutageWait time.Duration
	// AtIntent, when set, is called as each intent of the fault phase
	// starts, on its client's goroutine, before it is sent: a partition
	// cut and healed at seeded intents.
	AtIntent func(ctx context.Context, i int)
	// BeforeHeal, when set, is called once the clients of the fault phase
	// have finished and before healing starts: a partition's last heal.
	BeforeHeal func(ctx context.Context) error
	// KeepGoing, when set, lets the workload outlive its plan (Intents,
	// or Duration): once the plan is done, clients start more intents
	// for as long as it says so. It is told the latest start (an offset
	// of the run, -1 for none) of an attempt acknowledged so far: a
	// failover drill goes on until a transfer sent after the failover is
	// acknowledged, without which its unavailability is unknown. Those
	// intents are ordinary transfers, after the planned ones in the
	// history.
	KeepGoing func(lastAckStartNs int64) bool
	// AfterCommit, when set, is called by a server copy of an HTTP run
	// once a transfer's transaction has committed, before the server does
	// anything more (idem.Hooks.AfterCommit), on the request's goroutine:
	// a partition that cuts right after a commit.
	AfterCommit func(ctx context.Context)
	// Cuts, when set, says what a partition did; the history keeps it
	// (History.Partitions).
	Cuts func() []CutRecord
	// pools, when set, keeps RunOnWith's pool on each bank for the next
	// run on it (a shrink's or a campaign's banks, recycled).
	pools *poolCache
	// noLockModel turns the scheduler's model of row locks off (the tests
	// compare a run with it and without); stats, when set, is told what
	// the scheduler asked PostgreSQL and what it predicted.
	noLockModel bool
	stats       *schedStats
}

// ErrNoCrash is returned for a run with Config.KillPostgres but no
// Options.CrashPostgres.
var ErrNoCrash = errors.New("chaos: KillPostgres needs Options.CrashPostgres")

// RunWith is Run with options. When db has a Reset method (a pgxpool.Pool
// does), it is called once PostgreSQL is back after a crash, so that no
// connection from before the crash is handed out again.
func RunWith(ctx context.Context, db bank.DB, cfg Config, opts Options) (*History, error) {
	cfg = cfg.WithDefaults()
	if cfg.Target != nil {
		return runTarget(ctx, cfg, opts) // someone else's server: db is not used
	}
	if cfg.Failover != "" {
		// The failover is the run's crash: Options.CrashPostgres kills
		// the primary and promotes the standby.
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		cfg.KillPostgres = true
	}
	if cfg.KillPostgres && opts.CrashPostgres == nil {
		return nil, ErrNoCrash
	}
	if cfg.Deterministic {
		return runDeterministic(ctx, db, cfg, opts)
	}
	e := newEngine(db, cfg)
	e.crashPostgres = opts.CrashPostgres
	if err := e.place(opts.Hosts); err != nil {
		return nil, err
	}
	e.atIntent, e.beforeHealHook, e.cuts, e.afterCommit = opts.AtIntent, opts.BeforeHeal, opts.Cuts, opts.AfterCommit
	e.keepGoing = opts.KeepGoing
	e.began, e.outages = opts.Began, opts.Outages
	if opts.Outages && opts.OutageWait > 0 {
		e.clock.SetPatience(opts.OutageWait)
	}
	if err := e.open(ctx); err != nil {
		return nil, err
	}
	if cfg.HTTP {
		rig, err := startHTTP(e)
		if err != nil {
			return nil, err
		}
		defer rig.close()
		e.rig = rig
	}
	return e.run(ctx, opts.Progress)
}

type engine struct {
	db    bank.DB
	cfg   Config
	lay   *layout
	start time.Time
	clock *faults.Clock
	// clockStart is the simulated time of the first key.
	clockStart time.Time
	env        *faults.Env

	store    *idem.Store
	handlers []*idem.Handler
	servers  []faults.Server
	faults   map[string]faults.Fault
	crash    stopper
	// sched is the deterministic scheduler (Config.Deterministic); nil in
	// a free run, where every goroutine goes as Go's scheduler lets it.
	sched *sched
	// bound bounds each delivery to a server (attemptTimeout, or detBound
	// in a deterministic run).
	bound time.Duration
	// takeoverWait is the takeoverWait constant, or longer in a test.
	takeoverWait time.Duration
	// sms, log and locks are the systems beyond the database: every
	// transfer commits an SMS and an event in its outbox, which pipeline
	// drains to sms and log while clients run; locks is the lock service in
	// front of server copy 0 (the article's Redis).
	sms      *outbox.Provider
	log      *outbox.Log
	locks    *outbox.Locks
	pipeline *outbox.Pipeline
	// rig carries the run over real HTTP (Config.HTTP); nil in process.
	rig *httpRig

	mu       sync.Mutex
	intents  []*Intent
	audits   []Snapshot
	fired    map[string]int
	server   map[string]int
	deferred []*Intent // key reuses whose first intent had no final answer yet
	// decided are the intents decided when sent (Planned.Overdraw and its
	// funding follower): their amounts, and which of the two pays which.
	// Every later attempt sends the same request.
	decided map[int]Planned
	// restarts are a target run's restarts of the target.
	restarts []TargetRestart
	cleanup  *CleanupRun
	stalls   []string
	freezes  []Freeze
	// keys counts, per intent, the keys its client has made after a 5xx
	// (the new-key-after-5xx mistake).
	keys map[int]int
	// beforeHeal is the key store as the fault phase left it.
	beforeHeal *KeyCensus
	done       atomic.Int64

	// late counts the server calls that outlive their client's attempt:
	// late requests, staged takeovers, deadlocking transactions.
	late *group

	// hosts, atIntent and beforeHealHook are Options'.
	hosts          []Host
	atIntent       func(ctx context.Context, i int)
	beforeHealHook func(ctx context.Context) error
	cuts           func() []CutRecord
	afterCommit    func(ctx context.Context)
	keepGoing      func(lastAckStartNs int64) bool
	// lastAck is the latest start of an acknowledged attempt (-1: none),
	// for keepGoing; beyond are the intents sent after the plan's.
	lastAck atomic.Int64
	beyond  []*Intent
	// pastPlan counts the intents started past the plan; planEnd and
	// pastLast are when the plan was done and the last of them started
	// (offsets of the run).
	pastPlan          atomic.Int64
	planEnd, pastLast atomic.Int64

	// crashPostgres kills and restarts PostgreSQL (Config.KillPostgres).
	crashPostgres func(ctx context.Context) error
	began         func(time.Time)
	outages       bool
	crashes       []Crash
	sideEffects   *outbox.Snapshot
	// pipeFired are the pipeline's fault decisions that fired, in a
	// deterministic run (History.PipelineFaults).
	pipeFired []outbox.Firing
	crashErr  error
	crashWG   sync.WaitGroup
	crashOnce sync.Once

	// workerErrs are the pipeline's errors (History.WorkerErrors).
	workerErrs *WorkerErrors
}

func newEngine(db bank.DB, cfg Config) *engine {
	return newEngineOn(db, cfg, nil)
}

// newEngineOn is newEngine under the scheduler s (nil: free).
func newEngineOn(db bank.DB, cfg Config, s *sched) *engine {
	clock := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
	e := &engine{
		db: db, cfg: cfg, lay: cfg.layout(), clock: clock, clockStart: clock.Now(),
		env:    faults.NewEnv(cfg.Seed, clock),
		fired:  map[string]int{},
		server: map[string]int{},
		sched:  s,
		late:   s.newGroup(),
		bound:  attemptTimeout,
		// A test of the race with the correct handler waits as long as
		// it takes (realEngine).
		takeoverWait: takeoverWait,
	}
	var duplicate faults.Fault = &faults.Duplicate{Copies: 2}
	e.crash = freeCrash{&faults.CrashAfterClaim{}}
	if s != nil {
		// The faults that start goroutines start tasks instead.
		duplicate, e.crash, e.bound = &taskDuplicate{e: e}, &taskCrash{e: e, g: s.newGroup()}, detBound
	}
	e.faults = map[string]faults.Fault{
		FaultLoseResponse:     &faults.LoseResponse{},
		FaultDropRequest:      &faults.DropRequest{},
		FaultDuplicate:        duplicate,
		FaultCrashAfterClaim:  e.crash,
		FaultFailBeforeCommit: &faults.FailBeforeCommit{},
		FaultSlow:             &faults.Delay{Latency: time.Millisecond},
	}
	// One store, shared by every copy of the server, as PostgreSQL is.
	store := &idem.Store{NewLockID: idem.SeededLockIDs(cfg.Seed)}
	e.store = store
	e.sms, e.log, e.locks = outbox.NewProvider(cfg.Seed), outbox.NewLog(3), outbox.NewLocks(clock.Now)
	// Code that takes the lock in two commands meets the others between
	// them: a round trip to Redis, or a step of the scheduler.
	e.locks.RoundTrip = func(ctx context.Context) { e.sched.sleep(ctx, lockRoundTrip, "the lock: between GET and SET") }
	var flaws outbox.Flaws
	if cfg.Bug != nil {
		flaws = cfg.Bug.Outbox
	}
	lockTokens := idem.SeededLockIDs(cfg.Seed ^ 0x7265646973)
	for k := range cfg.Instances {
		skew := appClockSkew(k)
		h := &idem.Handler{DB: db, Store: store, Now: func() time.Time { return clock.Now().Add(skew) }}
		if s != nil {
			// A server the scheduler keeps waiting is not slow.
			h.WorkTimeout = detBound
		}
		if k == cfg.Instances-1 && cfg.Instances > 1 {
			// The last copy waits for a key in progress instead of
			// answering 409: both conflict policies meet the same faults.
			h.Conflict, h.WaitInterval, h.WaitTimeout = idem.WaitForResult, realWaitInterval, realWaitTimeout
			if s != nil {
				h.WaitInterval, h.WaitTimeout = waitInterval, waitTimeout
			}
		}
		if cfg.Bug != nil {
			cfg.Bug.Apply(h)
		}
		effects := &outbox.Effects{DB: db, SMS: e.sms, Log: e.log, Flaws: flaws}
		if s != nil {
			// The dispatchers wait, idle, for a transfer to commit.
			effects.Committed = e.kickPipeline
		}
		h.Effects = effects
		e.handlers = append(e.handlers, h)
		serve := func(ctx context.Context, req idem.Request) (bank.Response, error) {
			resp, err := h.Handle(e.paced(ctx), req)
			if errors.Is(err, idem.ErrLostLock) {
				e.count(PathFencing)
			}
			return resp, err
		}
		if k == 0 {
			serve = e.behindLock(serve, lockTokens, flaws)
		}
		e.servers = append(e.servers, serve)
	}
	return e
}

// lockRoundTrip is a free run's round trip to the lock service, between
// two commands of code that sends them apart.
const lockRoundTrip = 200 * time.Microsecond

// behindLock puts the lock outside the database in front of a server, as
// the article's Redis: SET NX PX for the key's TTL before the work (409 when
// another holds it), compare-and-delete after. A holder stopped by
// crash-after-claim holds it past its expiry; the key row's fencing in
// PostgreSQL, not the lock, is what stops its late commit.
func (e *engine) behindLock(serve faults.Server, tokens func() string, flaws outbox.Flaws) faults.Server {
	return func(ctx context.Context, req idem.Request) (bank.Response, error) {
		lk, ok := e.locks.AcquireWith(ctx, fmt.Sprintf("idem-lock:%d:%s", req.UserID, req.Key), tokens(), idem.DefaultLockTTL, flaws)
		if !ok {
			return idem.InProgress(), nil
		}
		defer e.locks.Release(lk, flaws)
		return serve(ctx, req)
	}
}

// appClockSkew is how far server copy k's own clock is from the simulated
// time: the first copy's is right, the second's a day and an hour behind,
// the third's 45 s ahead. Locks and key ages are measured on the database's
// clock, so a correct handler cannot tell; one that measures them on its own
// clock writes keys that the cleanup job thinks are a day old, and takes
// over locks that are still valid.
func appClockSkew(k int) time.Duration {
	switch k % 3 {
	case 1:
		return -25 * time.Hour
	case 2:
		return 45 * time.Second
	}
	return 0
}

// advance moves the run's clock (and the database's) on by d, and tells
// the pipeline, whose leases and backoffs may have run out.
func (e *engine) advance(d time.Duration) {
	e.clock.Advance(d)
	e.kickPipeline()
}

// kickPipeline tells a deterministic run's idle dispatchers and consumer
// that there may be something to do; a free run's poll on their own.
func (e *engine) kickPipeline() {
	if e.sched != nil && e.pipeline != nil {
		e.pipeline.Kick()
	}
}

// stall records a staged race that did not happen as planned.
func (e *engine) stall(format string, args ...any) {
	e.mu.Lock()
	e.stalls = append(e.stalls, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// count records that a server took defence path p once.
func (e *engine) count(p string) {
	e.mu.Lock()
	e.server[p]++
	e.mu.Unlock()
}

// observe makes every request under ctx report the defence paths it takes
// inside a server: a takeover, the wait policy's wait, a transaction run
// again after a deadlock.
func (e *engine) observe(ctx context.Context) context.Context {
	h := idem.HooksFrom(ctx)
	prev := h.AfterClaim
	h.AfterClaim = func(ctx context.Context, c idem.Claim) {
		if c.TookOver {
			e.count(PathTakeover)
		}
		if prev != nil {
			prev(ctx, c)
		}
	}
	h.Waited = func(_ context.Context, c idem.Claim) {
		if c.Action == idem.Replay {
			e.count(PathWaited)
		}
	}
	return bank.WithTxRetry(idem.WithHooks(ctx, h), e.txRetried)
}

// txRetried counts a transaction that InTx runs again.
func (e *engine) txRetried(error) { e.count(PathTxRetry) }

// open replaces the lesson's accounts with the run's own, and makes the
// database's clock (on which locks expire) follow the run's. A run with a
// mistake opens them on the mistake's schema (mistakes.Bug.ApplySchema).
func (e *engine) open(ctx context.Context) error {
	if err := e.clock.Follow(ctx, e.db); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM idempotency_keys; DELETE FROM transfers; DELETE FROM accounts"); err != nil {
			return fmt.Errorf("empty the bank: %w", err)
		}
		if e.cfg.Bug != nil {
			if err := e.cfg.Bug.ApplySchema(ctx, tx); err != nil {
				return err
			}
		}
		for _, a := range e.lay.accounts {
			if _, err := tx.Exec(ctx,
				"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES ($1, $2, $3, $4, $5)",
				a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo); err != nil {
				return fmt.Errorf("open account %d: %w", a.ID, err)
			}
		}
		return nil
	})
}

// since is the history's clock: nanoseconds since the start, or in a
// deterministic run the scheduler's steps.
func (e *engine) since() int64 {
	if e.sched != nil {
		return e.sched.now()
	}
	return int64(time.Since(e.start))
}

// plan is intent i as the seed decides it.
func (e *engine) plan(i int) Planned {
	p := e.cfg.intentIn(e.lay, i)
	if e.cfg.Target == nil {
		return p // only a target run decides intents when it sends
	}
	e.mu.Lock()
	if d, ok := e.decided[i]; ok {
		p = d
	}
	e.mu.Unlock()
	return p
}

func newIntent(i int, p Planned) *Intent {
	return &Intent{Index: i, Label: p.Label, UserID: p.UserID, Key: p.Key, Request: p.Request,
		Outcome: SeenUnknown, Reuse: p.Reuse, ReuseOf: p.ReuseOf, Overdraw: p.Overdraw, Funds: p.Funds}
}

func (e *engine) run(ctx context.Context, progress Progress) (*History, error) {
	e.start = time.Now()
	if e.began != nil {
		e.began(e.start)
	}
	cfg := e.cfg
	pipeCfg := outbox.PipelineConfig{Seed: cfg.Seed, Rates: map[string]float64{}}
	if cfg.Bug != nil {
		pipeCfg.Flaws = cfg.Bug.Outbox
	}
	for _, k := range outbox.PipelineFaults() {
		pipeCfg.Rates[k] = cfg.Faults[k]
	}
	pipeCfg.Dispatchers, pipeCfg.Fire = cfg.Dispatchers, cfg.PipelineFaults
	if e.sched != nil {
		// Its dispatchers and consumer are tasks, started once the clients
		// are (drive): the default policy prefers the clients.
		e.pipeline = outbox.NewPipeline(e.db, e.sms, e.log, pipeCfg)
	} else {
		e.pipeline = outbox.StartPipeline(ctx, e.db, e.sms, e.log, pipeCfg)
	}
	defer e.pipeline.Stop()
	total := cfg.Intents
	var deadline time.Time
	if total <= 0 {
		deadline = e.start.Add(cfg.Duration)
	} else {
		e.intents = make([]*Intent, total)
	}

	// The auditor reads every balance in one snapshot, over and over, for as
	// long as clients run.
	stopAudit := e.startAudit(ctx)

	// The crash comes at a moment the seed picks: when a seeded intent
	// starts, or at a seeded share of the duration.
	crashAt := -1
	if cfg.KillPostgres {
		if total > 0 {
			crashAt = cfg.CrashIntent()
		} else {
			t := time.AfterFunc(cfg.CrashAfter(), func() { e.killPostgres(ctx, -1) })
			defer t.Stop()
		}
	}
	e.drive(ctx, progress, deadline, crashAt)
	if len(e.beyond) > 0 {
		sort.Slice(e.beyond, func(a, b int) bool { return e.beyond[a].Index < e.beyond[b].Index })
		e.intents = append(e.intents, e.beyond...)
	}
	// Healing starts with PostgreSQL up again.
	e.crashOnce.Do(func() {}) // a crash timer that has not fired never will
	crashErr := waitGroup(&e.crashWG, 2*time.Minute, "PostgreSQL to be killed and started again")
	if err := ctx.Err(); err != nil {
		e.crash.KillAll()
		_ = e.late.wait(ctx, drainTimeout, "requests still on their way to the servers")
		_ = stopAudit()
		return nil, err
	}
	if crashErr != nil {
		e.crash.KillAll()
		_ = stopAudit()
		return nil, crashErr
	}
	if total <= 0 {
		sort.Slice(e.intents, func(a, b int) bool { return e.intents[a].Index < e.intents[b].Index })
	}

	if e.beforeHealHook != nil {
		if err := e.beforeHealHook(ctx); err != nil {
			e.crash.KillAll()
			_ = stopAudit()
			return nil, err
		}
	}
	runErr := e.settle(ctx)
	e.crash.KillAll()
	if err := stopAudit(); err != nil && runErr == nil {
		runErr = err
	}
	if e.crashErr != nil && runErr == nil {
		runErr = e.crashErr
	}
	if runErr != nil {
		return nil, runErr
	}

	h := &History{Seed: cfg.Seed, Config: cfg, Opening: e.lay.accounts, Audits: e.audits, Fired: e.fired,
		Server: e.server, Crashes: e.crashes, Cleanup: e.cleanup, Stalls: e.stalls, BeforeHeal: e.beforeHeal, Freezes: e.freezes,
		SideEffects: e.sideEffects, PipelineFaults: e.pipeFired, WorkerErrors: e.workerErrs}
	if n := e.pastPlan.Load(); n > 0 {
		h.PastPlan = &PastPlan{Intents: int(n), EndNs: e.planEnd.Load(), LastNs: e.pastLast.Load()}
	}
	if e.cuts != nil {
		h.Partitions = e.cuts()
		for i := range h.Partitions {
			c := &h.Partitions[i]
			c.CutNs = c.Cut.Sub(e.start).Nanoseconds()
			if !c.Healed.IsZero() {
				c.HealedNs = c.Healed.Sub(e.start).Nanoseconds()
			}
		}
	}
	h.Intents = make([]Intent, len(e.intents))
	for i, in := range e.intents {
		h.Intents[i] = *in
	}
	var err error
	if h.Final, err = bank.ReadLedger(ctx, e.db); err != nil {
		return nil, err
	}
	if h.StuckKeys, err = keysWithStatus(ctx, e.db, "in_progress"); err != nil {
		return nil, err
	}
	if h.CompletedKeys, err = keysWithStatus(ctx, e.db, "completed"); err != nil {
		return nil, err
	}
	h.Duration = time.Since(e.start)
	return h, nil
}

// drive runs the clients of the fault phase: Clients goroutines take the
// intents in turn (until Intents are done, or deadline passes), each sending
// its own and, after a head, its follower; crashAt is the intent whose start
// kills PostgreSQL (-1: none).
func (e *engine) drive(ctx context.Context, progress Progress, deadline time.Time, crashAt int) {
	cfg := e.cfg
	total := cfg.Intents
	e.lastAck.Store(-1)
	store := func(in *Intent) {
		switch {
		case total <= 0:
			e.mu.Lock()
			e.intents = append(e.intents, in)
			e.mu.Unlock()
		case in.Index >= total:
			e.mu.Lock()
			e.beyond = append(e.beyond, in)
			e.mu.Unlock()
		default:
			e.intents[in.Index] = in
		}
		for _, a := range in.Attempts {
			if a.Seen == SeenOK && !a.Replayed && !a.Lookup {
				for last := e.lastAck.Load(); a.StartNs > last; last = e.lastAck.Load() {
					if e.lastAck.CompareAndSwap(last, a.StartNs) {
						break
					}
				}
			}
		}
		if progress != nil {
			n, of := int(e.done.Add(1)), total
			if n > total {
				of = 0 // past its plan (KeepGoing), the run is counted as one of a duration
			}
			progress(n, of)
		}
	}
	var next atomic.Int64
	clients := e.sched.newGroup()
	for k := range cfg.Clients {
		e.sched.spawn(ctx, fmt.Sprintf("client-%d", k+1), clients, func(ctx context.Context) {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if total > 0 && i >= total || total <= 0 && time.Now().After(deadline) {
					now := e.since()
					e.planEnd.CompareAndSwap(0, now)
					if e.keepGoing == nil || !e.keepGoing(e.lastAck.Load()) {
						return
					}
					e.pastPlan.Add(1)
					e.pastLast.Store(now)
				}
				if i == crashAt {
					e.killPostgres(ctx, i)
				}
				if e.atIntent != nil {
					e.atIntent(ctx, i)
				}
				p := e.plan(i)
				if p.Follower {
					continue // the client of intent i-1 sends it
				}
				if p.Overdraw {
					p = e.overdraw(ctx, i, p)
				}
				if f := cfg.DBFault(i); f != 0 && e.rig != nil {
					e.rig.armDB(f)
				}
				in := e.send(ctx, i, p)
				in.Client = k + 1
				if t := cfg.Target; t != nil && t.Restart != nil && i == cfg.CrashIntent() && ctx.Err() == nil {
					// Between the key's answer and its retry.
					if e.restartTarget(ctx, i) && in.Outcome != SeenUnknown {
						e.repeat(ctx, in, p, PhaseAfterRestart)
					}
				}
				store(in)
				if !cfg.head(e.lay, i) {
					continue
				}
				f := e.plan(i + 1)
				if f.Reuse != "" && in.Outcome == SeenUnknown {
					// Its key may still be free or in progress: a reuse now
					// would race the intent itself. It waits for healing.
					fin := newIntent(i+1, f)
					fin.Client = k + 1
					e.mu.Lock()
					e.deferred = append(e.deferred, fin)
					e.mu.Unlock()
					store(fin)
					continue
				}
				fin := e.send(ctx, i+1, f)
				fin.Client = k + 1
				store(fin)
				if p.Overdraw && in.Outcome == SeenRejected && fin.Outcome == SeenOK && ctx.Err() == nil {
					// The money arrived: the refused request again, its key.
					e.repeat(ctx, in, p, PhaseAfterFunds)
				}
			}
		})
	}
	if e.sched != nil {
		e.pipeline.StartOn(ctx, newPipeTasks(ctx, e.sched))
	}
	_ = clients.wait(ctx, 24*time.Hour, "the clients")
}

// settle ends the run, faults off. Requests still on their way arrive, the
// clock moves past every lock, unknown intents are retried with their key
// until they settle, the silent servers wake up, the key reuses that waited
// for their first intent are sent, the cleanup job runs, and some intents
// are sent once more after it.
func (e *engine) settle(ctx context.Context) error {
	if e.rig != nil {
		e.rig.healing.Store(true)
	}
	if err := e.late.wait(ctx, drainTimeout, "requests still on their way to the servers (late ones, staged takeovers and deadlocks)"); err != nil {
		return err
	}
	if e.rig != nil {
		if err := waitGroup(&e.rig.inflight, drainTimeout, "the HTTP servers' handlers of requests whose clients had gone"); err != nil {
			return err
		}
	}
	// Before the clock moves past every lock, which would hide it: a key in
	// progress whose holder has returned was abandoned.
	census, err := e.census(ctx)
	if err != nil {
		return err
	}
	e.beforeHeal = census
	e.advance(idem.DefaultLockTTL + time.Second)
	if err := e.heal(ctx); err != nil {
		return err
	}
	// A woken server that lost its key fails the fencing check; the
	// servers' wrapper counts that. The path is counted on the server's own
	// word that it carried on, not on the call that woke it.
	for _, s := range e.crash.stopped() {
		woken, err := s.wake(ctx)
		if err != nil {
			return err
		}
		if woken {
			e.count(PathWoken)
		}
	}
	if err := e.sendDeferred(ctx); err != nil {
		return err
	}
	if err := e.runCleanup(ctx); err != nil {
		return err
	}
	if err := e.repeatAfterCleanup(ctx); err != nil {
		return err
	}
	return e.settleSideEffects(ctx)
}

// settleSideEffects heals the side effects once no transfer can commit any
// more: their faults stop, the clock moves past every lease and backoff, the
// outbox is drained and the consumer catches up. Then the faults that fired
// and the defence paths taken join the run's, and the side effects are read
// for the checker.
func (e *engine) settleSideEffects(ctx context.Context) error {
	e.pipeline.Stop()
	if err := e.pipeline.Settle(ctx, func(d time.Duration) { e.clock.Advance(d) }); err != nil {
		return err
	}
	if err := e.clock.Err(); err != nil {
		return err
	}
	world := outbox.World{SMS: e.sms, Log: e.log, Consumer: outbox.DefaultConsumer, Leases: true}
	if e.rig == nil {
		world.Locks = e.locks // over HTTP the servers have no lock in front
	}
	snap, err := outbox.Read(ctx, e.db, world)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, n := range e.pipeline.Fired() {
		e.fired[k] += n
	}
	for k, n := range e.pipeline.Paths() {
		e.server[k] += n
	}
	st := e.locks.Stats()
	e.server[PathLockTakenAfterExpiry] += st.TakenAfterExpiry
	e.server[PathLockReleaseRefused] += st.ReleaseRefused
	e.sideEffects = &snap
	// The auditor's test: a run that takes PostgreSQL away expects it
	// gone for a while (snapshot).
	e.workerErrs = workerErrors(e.pipeline.Errors(), e.cfg.KillPostgres || e.outages)
	if e.sched != nil {
		e.pipeFired = e.pipeline.Firings()
	}
	return nil
}

// send runs intent i: in a target run, first the request without its key
// when the seed says so (Planned.Keyless); its fault phase; then, when it
// has a final answer and the seed says so, the same request once more (a
// user tapping again).
func (e *engine) send(ctx context.Context, i int, p Planned) *Intent {
	var keyless *Attempt
	if p.Keyless && e.rig != nil && e.rig.target != nil {
		keyless = e.rig.sendKeyless(ctx, i, p)
	}
	var in *Intent
	if e.rig != nil {
		in = e.rig.faultPhase(ctx, i, p)
	} else {
		in = e.faultPhase(ctx, i, p)
	}
	in.Keyless = keyless
	if p.Repeat && in.Outcome != SeenUnknown && ctx.Err() == nil {
		e.repeat(ctx, in, p, PhaseRepeat)
	}
	return in
}

// repeat sends in once more with its key, no fault: the answer must be the
// stored one, replayed.
func (e *engine) repeat(ctx context.Context, in *Intent, p Planned, phase string) {
	if e.rig != nil {
		e.rig.repeat(ctx, in, p, phase)
		return
	}
	in.Attempts = append(in.Attempts, e.attempt(ctx, in.Index, p, len(in.Attempts)+1, phase, ""))
}

// faultPhase runs intent i with faults on, for at most MaxAttempts.
func (e *engine) faultPhase(ctx context.Context, i int, p Planned) *Intent {
	in := newIntent(i, p)
	for attempt := 1; attempt <= e.cfg.MaxAttempts && ctx.Err() == nil; attempt++ {
		a := e.attempt(ctx, i, p, attempt, PhaseFault, e.cfg.Fault(i, attempt))
		in.Attempts = append(in.Attempts, a)
		if a.Seen != SeenUnknown {
			in.Outcome = a.Seen
			break
		}
		e.backoff(ctx, a)
	}
	return in
}

// heal retries every unknown intent, without faults, until it settles.
func (e *engine) heal(ctx context.Context) error {
	var todo []*Intent
	for _, in := range e.intents {
		if in.Outcome == SeenUnknown && !e.isDeferred(in) {
			in.Healed = true
			todo = append(todo, in)
		}
	}
	return e.parallel(ctx, todo, "healer", func(ctx context.Context, in *Intent) {
		if e.rig != nil {
			e.rig.heal(ctx, in)
			return
		}
		e.sendClean(ctx, in)
	})
}

func (e *engine) isDeferred(in *Intent) bool {
	for _, d := range e.deferred {
		if d == in {
			return true
		}
	}
	return false
}

// sendClean sends in, no faults, until it has a final answer.
func (e *engine) sendClean(ctx context.Context, in *Intent) {
	p := e.plan(in.Index)
	for n := 0; n < HealAttempts && in.Outcome == SeenUnknown && ctx.Err() == nil; n++ {
		a := e.attempt(ctx, in.Index, p, len(in.Attempts)+1, PhaseHeal, "")
		in.Attempts = append(in.Attempts, a)
		in.Outcome = a.Seen
		e.backoff(ctx, a)
	}
}

// sendDeferred sends the key reuses whose first intent had no final answer
// in the fault phase; healing has given it one.
func (e *engine) sendDeferred(ctx context.Context) error {
	return e.parallel(ctx, e.deferred, "reuser", func(ctx context.Context, in *Intent) {
		if e.rig != nil {
			e.rig.sendClean(ctx, in)
			return
		}
		e.sendClean(ctx, in)
	})
}

// census reads the keys in progress, and the locks of the holders still
// alive: the servers stopped after their claim, which have not returned.
// Every other request has returned by now.
func (e *engine) census(ctx context.Context) (*KeyCensus, error) {
	c := &KeyCensus{InProgress: []HeldKey{}, LiveLocks: []string{}}
	rows, err := e.db.Query(ctx, "SELECT user_id::text || '/' || key, coalesce(lock_id, '') FROM idempotency_keys WHERE status = 'in_progress' ORDER BY 1")
	if err != nil {
		return nil, fmt.Errorf("read the keys in progress before healing: %w", err)
	}
	c.InProgress, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HeldKey, error) {
		var k HeldKey
		err := r.Scan(&k.Key, &k.LockID)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the keys in progress before healing: %w", err)
	}
	for _, s := range e.crash.stopped() {
		c.LiveLocks = append(c.LiveLocks, s.lockID())
	}
	sort.Strings(c.LiveLocks)
	return c, nil
}

// runCleanup runs the 24 h cleanup job when the run's oldest key is a
// minute short of the retention period: every key of the run is younger,
// so it must delete none, and a retry of any of them is still a replay.
func (e *engine) runCleanup(ctx context.Context) error {
	target := e.clockStart.Add(idem.DefaultRetention - time.Minute)
	if now := e.clock.Now(); now.Before(target) {
		e.advance(target.Sub(now))
	}
	if err := e.clock.Err(); err != nil {
		return err
	}
	now := e.clock.Now()
	deleted, err := e.store.Cleanup(ctx, e.db, idem.DefaultRetention, now)
	if err != nil {
		return err
	}
	e.cleanup = &CleanupRun{AtNs: e.since(), Clock: now, Deleted: deleted}
	return nil
}

// repeatAfterCleanup sends a seeded share of the settled intents once more.
func (e *engine) repeatAfterCleanup(ctx context.Context) error {
	var todo []*Intent
	for _, in := range e.intents {
		if in.Outcome != SeenUnknown && e.cfg.RepeatsAfterCleanup(in.Index) {
			todo = append(todo, in)
		}
	}
	return e.parallel(ctx, todo, "repeater", func(ctx context.Context, in *Intent) { e.repeat(ctx, in, e.plan(in.Index), PhaseAfterCleanup) })
}

// parallel runs fn on every intent of todo, Clients at a time, in the order
// of todo: each worker (a task called name-k) takes the next one.
func (e *engine) parallel(ctx context.Context, todo []*Intent, name string, fn func(context.Context, *Intent)) error {
	var next atomic.Int64
	workers := e.sched.newGroup()
	for k := range min(e.cfg.Clients, len(todo)) {
		e.sched.spawn(ctx, fmt.Sprintf("%s-%d", name, k+1), workers, func(ctx context.Context) {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(todo) {
					return
				}
				fn(ctx, todo[i])
			}
		})
	}
	_ = workers.wait(ctx, 24*time.Hour, name+"s")
	return ctx.Err()
}

// waitGroup waits for wg at most d; the error says what it waited for.
func waitGroup(wg *sync.WaitGroup, d time.Duration, what string) error {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("waited %s for %s; they never finished", d, what)
	}
}

// backoff pauses before the next attempt: briefly, because in-process
// faults need no real patience, and a little longer when the server said
// another copy holds the key.
func backoff(a Attempt) {
	switch {
	case a.Seen != SeenUnknown:
	case a.Status == 409:
		time.Sleep(2 * time.Millisecond)
	default:
		time.Sleep(200 * time.Microsecond)
	}
}

// backoff is backoff for a client of this run: in a deterministic run, a
// step (the others go on; nothing waits in real time).
func (e *engine) backoff(ctx context.Context, a Attempt) {
	if e.sched == nil {
		backoff(a)
		return
	}
	if a.Seen == SeenUnknown {
		e.sched.yield(ctx, "back off")
	}
}

// attempt delivers attempt n of intent i (planned as p) through fault
// (none when "").
func (e *engine) attempt(ctx context.Context, i int, p Planned, n int, phase, fault string) Attempt {
	key := e.cfg.AttemptKey(p, n)
	newKeyAfter5xx := e.cfg.Bug != nil && e.cfg.Bug.NewKeyAfterServerError
	if newKeyAfter5xx {
		e.mu.Lock()
		if k := e.keys[i]; k > 0 {
			key = NewKey(p, k+1)
		}
		e.mu.Unlock()
	}
	inst := e.cfg.Instance(i, n)
	e.sched.setDoing(ctx, fmt.Sprintf("%s a%d", p.Label, n))
	e.sched.yield(ctx, fmt.Sprintf("send to server %d (%s)", inst+1, orNoFault(fault)))
	a := Attempt{N: n, Phase: phase, Fault: fault, Key: key, Instance: inst, StartNs: e.since()}
	req := idem.Request{UserID: p.UserID, Key: key, Body: p.Request.Body()}
	server := e.servers[inst]

	ctx = e.observe(bank.WithIntent(ctx, p.Label))
	ctx, cancel := context.WithTimeoutCause(ctx, e.bound,
		fmt.Errorf("%s attempt %d: server %d gave no answer within %s", p.Label, n, inst+1, e.bound))
	defer cancel()
	if fault != "" {
		e.mu.Lock()
		e.fired[fault]++
		e.mu.Unlock()
	}
	var resp bank.Response
	var err error
	switch fault {
	case "":
		resp, err = server(ctx, req)
	case FaultClockJump:
		e.advance(idem.DefaultLockTTL + time.Second)
		resp, err = server(ctx, req)
	case FaultLate:
		// The request reaches the server only once this attempt has ended
		// for its client (it gave up), and lateBy after that.
		defer e.sched.spawn(context.WithoutCancel(ctx), fmt.Sprintf("%s a%d late request", p.Label, n), e.late, func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, e.bound)
			defer cancel()
			e.sched.sleep(ctx, lateBy, "on its way")
			_, _ = server(ctx, req)
		})
		err = &faults.NetworkError{Message: "timed out waiting for the response"}
	case FaultDeadlock:
		resp, err = server(e.deadlock(ctx, key, p.Request.From), req)
	case FaultExpireMidWrite:
		resp, err = server(bank.WithAfterChecks(ctx, e.expireMidWrite(ctx, req, inst)), req)
	case FaultFreeze:
		hook, thaw := e.freeze(ctx, p.Label, p.Request.From)
		resp, err = server(bank.WithAfterChecks(ctx, hook), req)
		thaw()
	case FaultDisconnect:
		var finished bool
		inner := func(ctx context.Context, req idem.Request) (bank.Response, error) {
			resp, err := server(ctx, req)
			finished = err == nil
			return resp, err
		}
		d := &faults.Disconnect{At: e.cfg.DisconnectPoint(i, n)}
		resp, err = d.Deliver(ctx, e.env, faults.Delivery{Attempt: n, Intent: p.Label, Request: req}, inner)
		if errors.Is(err, faults.ErrNoResponse) && finished {
			e.count(PathDisconnectFinished)
		}
	default:
		resp, err = e.faults[fault].Deliver(ctx, e.env, faults.Delivery{Attempt: n, Intent: p.Label, Request: req}, server)
	}
	a.EndNs = e.since()
	switch {
	case err != nil && errors.Is(err, faults.ErrNoResponse):
		a.Error, a.Seen = err.Error(), SeenUnknown
	case err != nil:
		// What an HTTP server answers for an unexpected failure.
		a.Error, a.Status, a.Seen = err.Error(), 500, SeenUnknown
	default:
		a.answered(resp)
	}
	if newKeyAfter5xx && a.Status >= 500 {
		// The mistake: a server error taken for a request that failed whole.
		e.mu.Lock()
		if e.keys == nil {
			e.keys = map[int]int{}
		}
		e.keys[i]++
		e.mu.Unlock()
	}
	return a
}

// deadlock returns ctx with the hook, run once by a transfer between its
// checks and its writes, that stages a real deadlock with it: another
// transaction locks the request's key row and then asks for the sender's
// row, which the transfer holds. The transfer, completing its key, then
// waits for that transaction, and PostgreSQL breaks the cycle in the
// transfer's backend, whose deadlock check comes first (deadlock_timeout
// 20 ms there, 10 s in the other): the transfer is aborted with 40P01, and
// InTx runs it again — once the other transaction has ended. InTx's own
// pause before a retry (a millisecond) does not wait for it: on a loaded
// machine the retry could lock the sender's row before the other
// transaction, woken by the abort, was granted it, and deadlock a second
// time with a transaction that still held the key row.
func (e *engine) deadlock(ctx context.Context, key string, from int64) context.Context {
	var once sync.Once
	ended := e.sched.newEvent()
	hook := func() { once.Do(func() { e.interfere(ctx, key, from, ended) }) }
	retry := func(err error) {
		e.txRetried(err)
		once.Do(ended.fire) // no hook ran: no other transaction
		if e.sched.waitAny(ctx, "the deadlocking transaction to end", stageTimeout, ended) < 0 {
			e.stall("deadlock on key %s: the other transaction had not ended %s after the transfer was aborted", key, stageTimeout)
		}
	}
	return bank.WithTxRetry(bank.WithAfterChecks(ctx, hook), retry)
}

// interfere runs the other transaction of a staged deadlock, and closes
// ended once it has ended (at once if it could not start).
func (e *engine) interfere(ctx context.Context, key string, from int64, ended *event) {
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.stageBound())
	tx, err := e.db.Begin(ctx)
	if err != nil {
		e.stall("deadlock on key %s: the other transaction could not begin after %s: %v", key, time.Since(started).Round(time.Millisecond), err)
		cancel()
		ended.fire()
		return
	}
	var pid int32
	_, err = tx.Exec(ctx, "SET LOCAL deadlock_timeout = '10s'")
	if err == nil {
		err = tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	}
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT 1 FROM idempotency_keys WHERE key = $1 FOR UPDATE", key)
	}
	if err != nil {
		e.stall("deadlock on key %s: the other transaction could not lock the key row: %v", key, err)
		_ = tx.Rollback(context.WithoutCancel(ctx))
		cancel()
		ended.fire()
		return
	}
	other := e.sched.spawn(ctx, e.taskName(ctx, "deadlocking transaction"), e.late, func(ctx context.Context) {
		defer ended.fire()
		defer cancel()
		_, _ = tx.Exec(ctx, "SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE", from)
		_ = tx.Rollback(context.WithoutCancel(ctx))
	})
	// Back to the transfer only once the other transaction waits for its
	// row: a transfer that reached the key row first would merely queue.
	if e.sched != nil {
		e.sched.untilBlocked(ctx, other)
		return
	}
	for {
		var waiting bool
		err := e.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock')", pid).Scan(&waiting)
		if err == nil && waiting {
			return
		}
		if ctx.Err() != nil || err != nil {
			e.stall("deadlock on key %s: the other transaction was not seen waiting for account %d after %s (%v)", key, from, time.Since(started).Round(time.Millisecond), err)
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// freeze returns the hook, run once by a transfer between its checks and
// its debit, that freezes the sender's account from another transaction;
// and thaw, to call once the attempt is over, which makes the account
// active again if the freeze went through. A transfer that holds the
// sender's row lock makes the freeze wait; the freeze gives up after 50 ms
// (lock_timeout), and the hook returns. One that does not hold it lets the
// freeze commit under it.
func (e *engine) freeze(ctx context.Context, label string, from int64) (hook, thaw func()) {
	var once sync.Once
	frozen, record := false, -1
	hook = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stageTimeout)
			defer cancel()
			tx, err := e.db.Begin(ctx)
			if err != nil {
				e.stall("freeze of account %d: could not begin: %v", from, err)
				return
			}
			defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '50ms'"); err != nil {
				e.stall("freeze of account %d: %v", from, err)
				return
			}
			tag, err := tx.Exec(ctx, "UPDATE accounts SET status = 'frozen' WHERE id = $1 AND status = 'active'", from)
			switch {
			case bank.SQLState(err) == "55P03": // lock_not_available
				e.count(PathFreezeWaited)
				return
			case err != nil:
				e.stall("freeze of account %d: %v", from, err)
				return
			case tag.RowsAffected() == 0:
				// Not active (a closed sender that a mistaken check let
				// through): nothing was frozen, and no freeze is recorded.
				return
			}
			// Taken before the COMMIT: a transfer that reads the account
			// frozen may answer before the freeze is recorded.
			at := e.since()
			if err := tx.Commit(ctx); err != nil {
				e.stall("freeze of account %d: commit: %v", from, err)
				return
			}
			frozen = true
			e.mu.Lock()
			record = len(e.freezes)
			e.freezes = append(e.freezes, Freeze{Intent: label, Account: from, AtNs: at})
			e.mu.Unlock()
		})
	}
	thaw = func() {
		if !frozen {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stageTimeout)
		defer cancel()
		if _, err := e.db.Exec(ctx, "UPDATE accounts SET status = 'active' WHERE id = $1", from); err != nil {
			e.stall("account %d, frozen under a transfer, could not be made active again: %v", from, err)
			return
		}
		e.mu.Lock()
		e.freezes[record].ThawNs = e.since()
		e.mu.Unlock()
	}
	return hook, thaw
}

// expireMidWrite returns the hook, run once by the holder of a key between
// its checks and its writes, that lets its lock expire right then: the
// clock jumps past the lock's TTL and a retry of the same request, on
// another copy of the server, takes the key over while the holder still has
// its writes to do. The holder carries on once the retry holds the key (or
// has answered without it); its completion must then fail the fencing check
// and roll back, and its release must leave the retry's claim alone.
func (e *engine) expireMidWrite(ctx context.Context, req idem.Request, holder int) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			e.advance(idem.DefaultLockTTL + time.Second)
			claimed, done := e.sched.newEvent(), e.sched.newEvent()
			var claim idem.Claim
			tctx := idem.WithHooks(context.WithoutCancel(ctx), idem.Hooks{AfterClaim: func(_ context.Context, c idem.Claim) {
				claim = c
				claimed.fire()
			}})
			tctx, cancel := context.WithTimeout(e.observe(tctx), e.bound)
			e.sched.spawn(tctx, e.taskName(ctx, "takeover"), e.late, func(ctx context.Context) {
				defer done.fire()
				defer cancel()
				_, _ = e.servers[(holder+1)%len(e.servers)](ctx, req)
			})
			switch e.sched.waitAny(ctx, "the retry to take the key over", e.takeoverWait, claimed, done) {
			case 0:
				if claim.TookOver {
					e.count(PathExpiredMidWrite)
				}
			case 1:
			default:
				e.stall("expire-mid-write on key %s: the retry had not claimed the key after %s", req.Key, e.takeoverWait)
			}
		})
	}
}

// answered records a response the client received, and what it tells the
// client: ok, refused, or still unknown (409, 429, 5xx).
func (a *Attempt) answered(resp bank.Response) {
	a.Status, a.Replayed, a.Body = resp.Status, resp.Replayed, Bytes(resp.Body)
	switch {
	case resp.OK():
		a.Seen = SeenOK
	case resp.Final():
		a.Seen = SeenRejected
	default:
		a.Seen = SeenUnknown
	}
}

// audit snapshots every balance each AuditEvery until ctx ends.
func (e *engine) audit(ctx context.Context) error {
	t := time.NewTicker(e.cfg.AuditEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := e.snapshot(ctx); err != nil {
			return err
		}
	}
}

// startAudit starts the auditor; stop stops it and returns the error that
// ended it, if any. In a deterministic run it reads the balances every
// AuditSteps steps.
func (e *engine) startAudit(ctx context.Context) (stop func() error) {
	if e.sched != nil {
		return e.auditSteps(ctx)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.audit(actx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// snapshot reads every balance in one snapshot, for the history.
func (e *engine) snapshot(ctx context.Context) error {
	at := e.since()
	var balances []int64
	err := pgx.BeginTxFunc(ctx, e.db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT balance_kobo FROM accounts ORDER BY id")
		if err != nil {
			return err
		}
		balances, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil && (e.cfg.KillPostgres || e.outages) {
		// The server is down, or the connection died with it: no
		// snapshot this time.
		return nil
	}
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	e.mu.Lock()
	e.audits = append(e.audits, Snapshot{AtNs: at, Balances: balances})
	e.mu.Unlock()
	return nil
}

// keysWithStatus lists the keys in status, as user/key.
func keysWithStatus(ctx context.Context, db bank.DB, status string) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT user_id::text || '/' || key FROM idempotency_keys WHERE status = $1 ORDER BY 1", status)
	if err != nil {
		return nil, fmt.Errorf("read the keys %s: %w", status, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the keys %s: %w", status, err)
	}
	return keys, nil
}

// killPostgres kills PostgreSQL and restarts it, once per run, in the background:
// clients carry on meanwhile, and see the failures a real outage gives.
// after is the intent whose start triggered it, or -1 for a timer.
func (e *engine) killPostgres(ctx context.Context, after int) {
	e.crashOnce.Do(func() {
		e.crashWG.Add(1)
		go func() {
			defer e.crashWG.Done()
			c := Crash{AfterIntent: after, AtNs: e.since()}
			err := e.crashPostgres(ctx)
			if r, ok := e.db.(interface{ Reset() }); ok {
				r.Reset()
			}
			c.UpNs = e.since()
			if err != nil {
				c.Error = err.Error()
				e.crashErr = fmt.Errorf("crash and restart PostgreSQL: %w", err)
			}
			e.mu.Lock()
			e.crashes = append(e.crashes, c)
			e.mu.Unlock()
		}()
	})
}

// Host is where one server copy of an HTTP run lives (Options.Hosts).
type Host struct {
	// DB is the copy's way to the bank's database: the same database as
	// the run's, over the copy's own network.
	DB bank.DB
	// Listen opens the copy's listener; the run's fault proxy in front of
	// it dials its address.
	Listen func() (net.Listener, error)
	// WorkTimeout is the copy's idem.Handler.WorkTimeout: a copy cut off
	// from PostgreSQL answers 500 once it has passed. Zero keeps the
	// handler's default.
	WorkTimeout time.Duration
}

// place gives each server copy its host's database and timeout.
func (e *engine) place(hosts []Host) error {
	if hosts == nil {
		return nil
	}
	if !e.cfg.HTTP || e.cfg.Target != nil || e.cfg.Deterministic {
		return errors.New("chaos: Options.Hosts needs an HTTP run of bank-sim's own server")
	}
	if len(hosts) != len(e.handlers) {
		return fmt.Errorf("chaos: %d hosts for %d server copies", len(hosts), len(e.handlers))
	}
	for k, h := range e.handlers {
		h.DB = hosts[k].DB
		if eff, ok := h.Effects.(*outbox.Effects); ok {
			eff.DB = hosts[k].DB
		}
		if hosts[k].WorkTimeout > 0 {
			h.WorkTimeout = hosts[k].WorkTimeout
		}
	}
	e.hosts = hosts
	return nil
}
