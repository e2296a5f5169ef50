package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/jackc/pgx/v5"
)

// HealAttempts bounds how often healing retries one unknown intent.
const HealAttempts = 30

// lateBy is how long a FaultLate request waits before it reaches the server,
// long after its client has given up and, usually, retried.
const lateBy = 3 * time.Millisecond

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
}

// ErrNoCrash is returned for a run with Config.KillPostgres but no
// Options.CrashPostgres.
var ErrNoCrash = errors.New("chaos: KillPostgres needs Options.CrashPostgres")

// RunWith is Run with options. When db has a Reset method (a pgxpool.Pool
// does), it is called once PostgreSQL is back after a crash, so that no
// connection from before the crash is handed out again.
func RunWith(ctx context.Context, db bank.DB, cfg Config, opts Options) (*History, error) {
	cfg = cfg.WithDefaults()
	if cfg.KillPostgres && opts.CrashPostgres == nil {
		return nil, ErrNoCrash
	}
	progress := opts.Progress
	e := newEngine(db, cfg)
	e.crashPostgres = opts.CrashPostgres
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
	return e.run(ctx, progress)
}

type engine struct {
	db    bank.DB
	cfg   Config
	start time.Time
	clock *faults.Clock
	env   *faults.Env

	handlers []*idem.Handler
	servers  []faults.Server
	faults   map[string]faults.Fault
	crash    *faults.CrashAfterClaim
	// rig carries the run over real HTTP (Config.HTTP); nil in process.
	rig *httpRig

	mu      sync.Mutex
	intents []*Intent
	audits  []Snapshot
	fired   map[string]int

	late      sync.WaitGroup
	takeovers atomic.Int64
	fencing   atomic.Int64

	// crashPostgres kills and restarts PostgreSQL (Config.KillPostgres).
	crashPostgres func(ctx context.Context) error
	crashes       []Crash
	crashErr      error
	crashWG       sync.WaitGroup
	crashOnce     sync.Once
}

func newEngine(db bank.DB, cfg Config) *engine {
	clock := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
	e := &engine{
		db: db, cfg: cfg, clock: clock,
		env:   faults.NewEnv(cfg.Seed, clock),
		crash: &faults.CrashAfterClaim{},
		fired: map[string]int{},
	}
	e.faults = map[string]faults.Fault{
		FaultLoseResponse:     &faults.LoseResponse{},
		FaultDropRequest:      &faults.DropRequest{},
		FaultDuplicate:        &faults.Duplicate{Copies: 2},
		FaultCrashAfterClaim:  e.crash,
		FaultFailBeforeCommit: &faults.FailBeforeCommit{},
		FaultSlow:             &faults.Delay{Latency: time.Millisecond},
	}
	// One store, shared by every copy of the server, as PostgreSQL is.
	store := &idem.Store{NewLockID: idem.SeededLockIDs(cfg.Seed)}
	for range cfg.Instances {
		h := &idem.Handler{DB: db, Store: store, Now: clock.Now}
		if cfg.Bug != nil {
			cfg.Bug.Apply(h)
		}
		e.handlers = append(e.handlers, h)
		e.servers = append(e.servers, func(ctx context.Context, req idem.Request) (bank.Response, error) {
			resp, err := h.Handle(ctx, req)
			if errors.Is(err, idem.ErrLostLock) {
				e.fencing.Add(1)
			}
			return resp, err
		})
	}
	return e
}

// open replaces the lesson's accounts with the run's own, and makes the
// database's clock (on which locks expire) follow the run's.
func (e *engine) open(ctx context.Context) error {
	if err := e.clock.Follow(ctx, e.db); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM idempotency_keys; DELETE FROM transfers; DELETE FROM accounts"); err != nil {
			return fmt.Errorf("empty the bank: %w", err)
		}
		for _, a := range e.cfg.Opening() {
			if _, err := tx.Exec(ctx,
				"INSERT INTO accounts (id, owner_id, holder, status, balance_kobo) VALUES ($1, $2, $3, $4, $5)",
				a.ID, a.OwnerID, a.Holder, a.Status, a.BalanceKobo); err != nil {
				return fmt.Errorf("open account %d: %w", a.ID, err)
			}
		}
		return nil
	})
}

func (e *engine) since() int64 { return int64(time.Since(e.start)) }

func (e *engine) run(ctx context.Context, progress Progress) (*History, error) {
	e.start = time.Now()
	cfg := e.cfg
	total := cfg.Intents
	var deadline time.Time
	if total <= 0 {
		deadline = e.start.Add(cfg.Duration)
	} else {
		e.intents = make([]*Intent, total)
	}

	// The auditor reads every balance in one snapshot, over and over, for as
	// long as clients run.
	auditCtx, stopAudit := context.WithCancel(ctx)
	auditDone := make(chan error, 1)
	go func() { auditDone <- e.audit(auditCtx) }()

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
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if total > 0 && i >= total || total <= 0 && time.Now().After(deadline) {
					return
				}
				if i == crashAt {
					e.killPostgres(ctx, i)
				}
				var in *Intent
				if e.rig != nil {
					in = e.rig.faultPhase(ctx, i)
				} else {
					in = e.faultPhase(ctx, i)
				}
				if total <= 0 {
					e.mu.Lock()
					e.intents = append(e.intents, in)
					e.mu.Unlock()
				} else {
					e.intents[i] = in
				}
				n := int(done.Add(1))
				if progress != nil {
					progress(n, total)
				}
			}
		}()
	}
	wg.Wait()
	// Healing starts with PostgreSQL up again.
	e.crashOnce.Do(func() {}) // a crash timer that has not fired never will
	e.crashWG.Wait()
	if err := ctx.Err(); err != nil {
		e.crash.KillAll()
		e.late.Wait()
		stopAudit()
		<-auditDone
		return nil, err
	}
	if total <= 0 {
		sort.Slice(e.intents, func(a, b int) bool { return e.intents[a].Index < e.intents[b].Index })
	}

	// Healing: no more faults. Requests still on their way arrive, the
	// clock moves past every lock, unknown intents are retried with their
	// key until they settle, and then the silent servers wake up.
	if e.rig != nil {
		e.rig.healing.Store(true)
	}
	e.late.Wait()
	e.clock.Advance(idem.DefaultLockTTL + time.Second)
	runErr := e.heal(ctx)
	// A woken server that lost its key fails the fencing check; the
	// servers' wrapper counts that.
	for _, s := range e.crash.Sleepers() {
		_, _ = s.Wake()
	}
	e.crash.KillAll()
	stopAudit()
	if err := <-auditDone; err != nil && runErr == nil {
		runErr = err
	}
	if e.crashErr != nil && runErr == nil {
		runErr = e.crashErr
	}
	if runErr != nil {
		return nil, runErr
	}

	h := &History{Seed: cfg.Seed, Config: cfg, Opening: cfg.Opening(), Audits: e.audits, Fired: e.fired,
		Takeovers: int(e.takeovers.Load()), FencingRollbacks: int(e.fencing.Load()), Crashes: e.crashes}
	h.Intents = make([]Intent, len(e.intents))
	for i, in := range e.intents {
		h.Intents[i] = *in
	}
	var err error
	if h.Final, err = bank.ReadLedger(ctx, e.db); err != nil {
		return nil, err
	}
	if h.StuckKeys, err = stuckKeys(ctx, e.db); err != nil {
		return nil, err
	}
	if len(h.Crashes) > 0 {
		if h.CompletedKeys, err = completedKeys(ctx, e.db); err != nil {
			return nil, err
		}
	}
	h.Duration = time.Since(e.start)
	return h, nil
}

// faultPhase runs intent i with faults on, for at most MaxAttempts.
func (e *engine) faultPhase(ctx context.Context, i int) *Intent {
	p := e.cfg.Intent(i)
	in := &Intent{Index: i, Label: p.Label, UserID: p.UserID, Key: p.Key, Request: p.Request, Outcome: SeenUnknown}
	for attempt := 1; attempt <= e.cfg.MaxAttempts && ctx.Err() == nil; attempt++ {
		a := e.attempt(ctx, i, p, attempt, PhaseFault, e.cfg.Fault(i, attempt))
		in.Attempts = append(in.Attempts, a)
		if a.Seen != SeenUnknown {
			in.Outcome = a.Seen
			break
		}
		backoff(a)
	}
	return in
}

// heal retries every unknown intent, without faults, until it settles.
func (e *engine) heal(ctx context.Context) error {
	var todo []*Intent
	for _, in := range e.intents {
		if in.Outcome == SeenUnknown {
			in.Healed = true
			todo = append(todo, in)
		}
	}
	work := make(chan *Intent)
	var wg sync.WaitGroup
	for range e.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in := range work {
				if e.rig != nil {
					e.rig.heal(ctx, in)
					continue
				}
				p := e.cfg.Intent(in.Index)
				for n := 0; n < HealAttempts && in.Outcome == SeenUnknown && ctx.Err() == nil; n++ {
					a := e.attempt(ctx, in.Index, p, len(in.Attempts)+1, PhaseHeal, "")
					in.Attempts = append(in.Attempts, a)
					in.Outcome = a.Seen
					backoff(a)
				}
			}
		}()
	}
	for _, in := range todo {
		work <- in
	}
	close(work)
	wg.Wait()
	return ctx.Err()
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

// attempt delivers attempt n of intent i (planned as p) through fault
// (none when "").
func (e *engine) attempt(ctx context.Context, i int, p Planned, n int, phase, fault string) Attempt {
	key := e.cfg.AttemptKey(p, n)
	inst := e.cfg.Instance(i, n)
	a := Attempt{N: n, Phase: phase, Fault: fault, Key: key, Instance: inst, StartNs: e.since()}
	req := idem.Request{UserID: p.UserID, Key: key, Body: p.Request.Body()}
	server := e.servers[inst]

	ctx = bank.WithIntent(ctx, p.Label)
	ctx = idem.WithHooks(ctx, idem.Hooks{AfterClaim: func(_ context.Context, c idem.Claim) {
		if c.TookOver {
			e.takeovers.Add(1)
		}
	}})
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
		e.clock.Advance(idem.DefaultLockTTL + time.Second)
		resp, err = server(ctx, req)
	case FaultLate:
		e.late.Add(1)
		sctx := context.WithoutCancel(ctx)
		go func() {
			defer e.late.Done()
			time.Sleep(lateBy)
			_, _ = server(sctx, req)
		}()
		err = &faults.NetworkError{Message: "timed out waiting for the response"}
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
	return a
}

// answered records a response the client received, and what it tells the
// client: ok, refused, or still unknown (409, 429, 5xx).
func (a *Attempt) answered(resp bank.Response) {
	a.Status, a.Replayed, a.Body = resp.Status, resp.Replayed, resp.Body
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
		if err != nil && e.cfg.KillPostgres {
			// The server is down, or the connection died with it: no
			// snapshot this time.
			continue
		}
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		e.mu.Lock()
		e.audits = append(e.audits, Snapshot{AtNs: at, Balances: balances})
		e.mu.Unlock()
	}
}

func stuckKeys(ctx context.Context, db bank.DB) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT user_id::text || '/' || key FROM idempotency_keys WHERE status = 'in_progress' ORDER BY 1")
	if err != nil {
		return nil, fmt.Errorf("read keys in progress: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read keys in progress: %w", err)
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

func completedKeys(ctx context.Context, db bank.DB) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT user_id::text || '/' || key FROM idempotency_keys WHERE status = 'completed' ORDER BY 1")
	if err != nil {
		return nil, fmt.Errorf("read completed keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read completed keys: %w", err)
	}
	return keys, nil
}
