package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5"
)

// Faults of a pipeline, each at its own rate per opportunity.
const (
	// FaultDispatcherCrash: a dispatcher dies after the provider or the log
	// accepted a row and before marking it done; a new one starts.
	FaultDispatcherCrash = "dispatcher-crash"
	// FaultDispatcherPause: a dispatcher stalls with the batch it claimed
	// until its lease has expired (on the database's clock), then carries
	// on, and must find what was taken over.
	FaultDispatcherPause = "dispatcher-pause"
	// FaultProviderTimeout: the provider accepts an SMS and its answer is
	// lost: the dispatcher hears a timeout and sends again later. The
	// answer to that re-send (a replay of the key) can be lost too, at
	// most maxLostAnswers times per SMS in all.
	FaultProviderTimeout = "provider-timeout"
	// FaultConsumerCrash: the consumer dies between its effect and its
	// offset commit (and, for code that commits its processed-events
	// marker apart, between the effect and the marker); the log
	// redelivers to the next session.
	FaultConsumerCrash = "consumer-crash"
)

// Defence paths a pipeline can take, counted so that a chaos run that never
// took one knows it proved nothing about it.
const (
	// PathResendReplayed: a row sent again (after a crash or a lost answer)
	// was recognised by the provider's key: no second SMS.
	PathResendReplayed = "outbox-resend-replayed"
	// PathRetryAfterFailure: a failed send was given back with a backoff
	// and sent by a later claim.
	PathRetryAfterFailure = "outbox-retry-after-failure"
	// PathLostClaim: a dispatcher that stalled past its lease found its row
	// taken over and sent nothing.
	PathLostClaim = "outbox-lost-claim"
	// PathTakeover: a row claimed again after its holder's lease expired.
	PathTakeover = "outbox-takeover"
	// PathRedeliverySkipped: an event delivered again was found processed
	// and had no second effect.
	PathRedeliverySkipped = "consumer-redelivery-skipped"
)

// PipelineFaults lists the pipeline's fault kinds; PipelinePaths its paths.
func PipelineFaults() []string {
	return []string{FaultConsumerCrash, FaultDispatcherCrash, FaultDispatcherPause, FaultProviderTimeout}
}

// PipelinePaths lists the pipeline's defence paths.
func PipelinePaths() []string {
	return []string{PathLostClaim, PathResendReplayed, PathRetryAfterFailure, PathTakeover, PathRedeliverySkipped}
}

// DefaultConsumer is a pipeline's consumer group.
const DefaultConsumer = "notifier"

// PipelineConfig is the side effects' half of a chaos run.
type PipelineConfig struct {
	// Seed decides every fault: each decision is a function of the seed,
	// the fault, the row or event, and how often it was tried, never of
	// the order goroutines run in.
	Seed uint64
	// Dispatchers is how many dispatchers run at once; 3 when zero.
	Dispatchers int
	// Consumer is the consumer's group; DefaultConsumer when empty.
	Consumer string
	// Rates per fault kind (see the Fault constants).
	Rates map[string]float64
	// Fire lists fault decisions that fire whatever Rates say: a recipe's,
	// which names the faults its run needs instead of drawing them.
	Fire  []Firing
	Flaws Flaws
}

// Firing is one fault decision that fired: Fault at its N-th chance (from
// 0) on On, a row id for the dispatcher's faults, the provider's
// idempotency key for provider-timeout, the event id for consumer-crash.
// Under a deterministic scheduler the same seed makes the same firings, so
// a list of them replays the pipeline's faults.
type Firing struct {
	Fault string `json:"fault"`
	On    string `json:"on"`
	N     int    `json:"n"`
}

// Pipeline runs dispatchers and a consumer while a chaos run's clients
// transfer, each failing at seeded rates, and then settles: faults off,
// everything sent and consumed. It counts the faults that fired and the
// defence paths taken.
type Pipeline struct {
	db   bank.DB
	sms  *Provider
	log  *Log
	cfg  PipelineConfig
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	fired  map[string]int
	paths  map[string]int
	tries  map[string]int // fault/id → times decided
	failed map[int64]bool // rows whose send failed once
	lost   map[string]int // provider key → answers lost
	errs   []error
	fire   map[Firing]bool
	firing []Firing // the decisions that fired, in order

	// sc runs the processes as tasks of a deterministic scheduler
	// (StartOn); nil for goroutines on real time.
	sc       Sched
	stopping atomic.Bool
}

// StartPipeline starts the dispatchers and the consumer on db, sending to
// sms and log, until Stop.
func StartPipeline(ctx context.Context, db bank.DB, sms *Provider, log *Log, cfg PipelineConfig) *Pipeline {
	p := NewPipeline(db, sms, log, cfg)
	ctx, p.stop = context.WithCancel(ctx)
	sms.LoseIf(p.losesAnswer)
	for k := range p.cfg.Dispatchers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.dispatch(ctx, k)
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.consume(ctx)
	}()
	return p
}

// NewPipeline is a pipeline that runs nothing until StartOn or Settle: no
// dispatcher and no consumer beside the clients yet, and so no fault. A
// deterministic chaos run starts it on its scheduler (StartOn), whose tasks
// replace StartPipeline's goroutines on real time.
func NewPipeline(db bank.DB, sms *Provider, log *Log, cfg PipelineConfig) *Pipeline {
	if cfg.Dispatchers <= 0 {
		cfg.Dispatchers = 3
	}
	if cfg.Consumer == "" {
		cfg.Consumer = DefaultConsumer
	}
	p := &Pipeline{db: db, sms: sms, log: log, cfg: cfg, fired: map[string]int{}, paths: map[string]int{},
		tries: map[string]int{}, failed: map[int64]bool{}, lost: map[string]int{}, stop: func() {}, fire: map[Firing]bool{}}
	for _, f := range cfg.Fire {
		p.fire[f] = true
	}
	return p
}

// fires decides whether fault fires at its next opportunity on id.
// A decision Fire lists fires whatever the rate.
//
// Each decision is drawn from the FNV-1a hash of "seed/fault/id/n", n the
// try's number on id, passed through a splitmix64 finalizer: the hash's
// top bits barely move with n, so that unmixed, every try on a row would
// decide as its first did (a dispatcher that crashed on a row would crash
// on it every time), where a fault's tries must be independent draws at
// its rate.
func (p *Pipeline) fires(fault, id string) bool {
	rate := p.cfg.Rates[fault]
	if rate <= 0 && len(p.fire) == 0 {
		return false
	}
	p.mu.Lock()
	key := fault + "/" + id
	n := p.tries[key]
	p.tries[key]++
	p.mu.Unlock()
	f := Firing{Fault: fault, On: id, N: n}
	if !p.fire[f] {
		if rate <= 0 {
			return false
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s/%d", p.cfg.Seed, key, n)
		if float64(splitmix64(h.Sum64())>>11)/(1<<53) >= rate {
			return false
		}
	}
	p.mu.Lock()
	p.fired[fault]++
	p.firing = append(p.firing, f)
	p.mu.Unlock()
	return true
}

// maxLostAnswers bounds the provider-timeouts on one SMS, its first send's
// and its replays' together: well below DefaultMaxAttempts, so that a
// correct dispatcher, which gives a row up only after that many failed
// sends, never gives one up in a chaos run.
const maxLostAnswers = 2

// losesAnswer decides whether the provider loses its answer to m, as fires
// does, the first send's and its replays' (re-sends of a key the provider
// has accepted, which it answers with the first message's id) being the
// tries of one key: at most maxLostAnswers times per key in all.
func (p *Pipeline) losesAnswer(m Message, replay bool) bool {
	if replay {
		p.mu.Lock()
		lost := p.lost[m.Key]
		p.mu.Unlock()
		if lost >= maxLostAnswers {
			return false
		}
	}
	return p.noteLost(m.Key, p.fires(FaultProviderTimeout, m.Key))
}

func (p *Pipeline) noteLost(key string, lose bool) bool {
	if lose {
		p.mu.Lock()
		p.lost[key]++
		p.mu.Unlock()
	}
	return lose
}

// splitmix64 is SplitMix64's finalizer: every bit of x moves every bit of
// the result.
func splitmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Firings lists the fault decisions that fired, in the order they were
// made: under a deterministic scheduler, what PipelineConfig.Fire needs to
// make them again.
func (p *Pipeline) Firings() []Firing {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Firing(nil), p.firing...)
}

func (p *Pipeline) count(path string) {
	p.mu.Lock()
	p.paths[path]++
	p.mu.Unlock()
}

func (p *Pipeline) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// idle is how long a dispatcher or the consumer waits when it found nothing.
const idle = time.Millisecond

// dispatch is dispatcher k's process: it claims and delivers until ctx
// ends, and after a crash a new dispatcher takes its place.
func (p *Pipeline) dispatch(ctx context.Context, k int) {
	for gen := 1; ctx.Err() == nil; gen++ {
		d := &Dispatcher{DB: p.db, Name: fmt.Sprintf("d%d.%d", k+1, gen), SMS: p.sms, Log: p.log, Flaws: p.cfg.Flaws}
		for ctx.Err() == nil {
			b, err := d.Claim(ctx)
			if err != nil {
				// PostgreSQL may be away for a moment (a chaos run kills
				// it): the rows wait, and Settle drains them.
				if ctx.Err() == nil {
					p.fail(err)
				}
				sleep(ctx, idle)
				continue
			}
			if len(b.Rows) == 0 {
				sleep(ctx, idle)
				continue
			}
			for _, r := range b.Rows {
				if r.Attempts > 1 && !p.failedBefore(r.ID) {
					p.count(PathTakeover)
				}
			}
			if p.fires(FaultDispatcherPause, fmt.Sprint(b.Rows[0].ID)) {
				p.pause(ctx, b)
			}
			if died := p.deliver(ctx, d, b); died {
				break // this dispatcher is dead; the next generation starts
			}
		}
	}
}

func (p *Pipeline) failedBefore(id int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed[id]
}

// pauseAfterExpiry is how long a paused dispatcher stays stalled once its
// lease has expired, unless another dispatcher takes its first row over
// sooner: long enough that the takeover usually comes first.
const pauseAfterExpiry = 20 * time.Millisecond

// pause stalls until the batch's lease has expired on the database's clock
// (a clock jump of the run moves it) and another dispatcher has taken the
// first row over or pauseAfterExpiry has passed, or the run stops.
func (p *Pipeline) pause(ctx context.Context, b Batch) {
	var until time.Time
	if err := p.db.QueryRow(ctx, "SELECT max(claimed_until) FROM outbox WHERE claim_token = $1", b.Token).Scan(&until); err != nil {
		return
	}
	var expired time.Time
	for ctx.Err() == nil {
		if expired.IsZero() {
			if now, err := bank.Now(ctx, p.db); err != nil {
				return
			} else if now.After(until) {
				expired = time.Now()
			}
		} else {
			var taken bool
			err := p.db.QueryRow(ctx, "SELECT coalesce(claim_token, '') <> $2 FROM outbox WHERE id = $1", b.Rows[0].ID, b.Token).Scan(&taken)
			if err != nil || taken || time.Since(expired) > pauseAfterExpiry {
				return
			}
		}
		sleep(ctx, idle)
	}
}

// deliver sends the batch's rows; a row picked for a crash kills the
// dispatcher between its send and its mark. It reports whether it died.
func (p *Pipeline) deliver(ctx context.Context, d *Dispatcher, b Batch) (died bool) {
	for _, r := range b.Rows {
		crash := p.fires(FaultDispatcherCrash, fmt.Sprint(r.ID))
		d.Hooks.AfterSend = nil
		dead := make(chan struct{})
		if crash {
			d.Hooks.AfterSend = func(context.Context, Row) {
				close(dead)
				runtime.Goexit() // a process that dies runs nothing more
			}
		}
		type result struct {
			o   Outcome
			err error
		}
		done := make(chan result, 1)
		go func() {
			o, err := d.Deliver(context.WithoutCancel(ctx), b.Token, r)
			done <- result{o, err}
		}()
		select {
		case <-dead:
			return true
		case res := <-done:
			if res.err != nil {
				p.fail(res.err)
				return true
			}
			p.outcome(r, res.o)
		}
	}
	return false
}

func (p *Pipeline) outcome(r Row, o Outcome) {
	switch o {
	case AlreadySent:
		p.count(PathResendReplayed)
	case LostClaim:
		p.count(PathLostClaim)
	case Retry:
		p.mu.Lock()
		p.failed[r.ID] = true
		p.mu.Unlock()
	}
	if (o == Sent || o == AlreadySent) && p.failedBefore(r.ID) {
		p.count(PathRetryAfterFailure)
	}
}

// errConsumerCrash is the crash injected between a consumer's steps.
var errConsumerCrash = errors.New("the consumer crashed before its offset commit")

// consume is the consumer's process: a session of its group reads the log;
// after a crash a new session starts at the committed offsets.
func (p *Pipeline) consume(ctx context.Context) {
	for ctx.Err() == nil {
		c := p.consumer(true)
		s := p.log.Join(p.cfg.Consumer, TransfersTopic)
		for ctx.Err() == nil {
			recs := s.Poll(16)
			if len(recs) == 0 {
				sleep(ctx, idle)
				continue
			}
			crashed := false
			for _, r := range recs {
				if err := p.process(ctx, c, s, r); err != nil {
					if !errors.Is(err, errConsumerCrash) && ctx.Err() == nil {
						p.fail(err)
					}
					crashed = true
					break
				}
			}
			if crashed {
				break
			}
		}
	}
}

func (p *Pipeline) consumer(faulty bool) *Consumer {
	c := &Consumer{DB: p.db, Name: p.cfg.Consumer, Flaws: p.cfg.Flaws}
	if faulty {
		// Each commit of the consumer's before its offset's is a chance
		// to die: after the effect (and its marker), and, for code that
		// commits the marker apart, between the effect and the marker.
		crash := func(_ context.Context, r Record) error {
			if p.fires(FaultConsumerCrash, r.ID) {
				return errConsumerCrash
			}
			return nil
		}
		c.Between, c.AfterEffect = crash, crash
	}
	return c
}

func (p *Pipeline) process(ctx context.Context, c *Consumer, s *Session, r Record) error {
	applied, err := c.Process(ctx, s, r)
	if err == nil && !applied {
		p.count(PathRedeliverySkipped)
	}
	return err
}

// Stop ends the fault phase: every dispatcher and the consumer stop where
// they are (a paused one included), and the provider answers every message.
func (p *Pipeline) Stop() {
	p.stopping.Store(true)
	p.stop()
	p.wg.Wait()
	p.sms.LoseIf(nil)
}

// settleRounds and settleGrace bound Settle.
const (
	settleRounds = 10
	settleGrace  = 5 * time.Second
)

// Settle is the pipeline's healing, after Stop: with no faults, it moves
// the database's clock past every lease and backoff (advance), drains the
// outbox and lets the consumer catch up, until nothing is left. It returns
// an error if something is still left after settleRounds rounds. Failures
// of the fault phase (PostgreSQL away for a moment) are not its business:
// what they left behind is drained here, and Errors counts them.
func (p *Pipeline) Settle(ctx context.Context, advance func(time.Duration)) error {
	d := &Dispatcher{DB: p.db, Name: "healer", SMS: p.sms, Log: p.log, Flaws: p.cfg.Flaws}
	c := p.consumer(false)
	// settleRounds rounds, and for settleGrace at least: a row that a
	// transaction still open at the stop has locked is passed over by
	// SKIP LOCKED until that transaction ends.
	start := time.Now()
	for round := 0; round < settleRounds || time.Since(start) < settleGrace; round++ {
		if round < settleRounds {
			advance(DefaultLease + maxBackoff)
		} else {
			time.Sleep(20 * time.Millisecond) // real time, for a transaction to end
		}
		for {
			b, err := d.Claim(ctx)
			if err != nil {
				return err
			}
			if len(b.Rows) == 0 {
				break
			}
			for _, r := range b.Rows {
				if r.Attempts > 1 && !p.failedBefore(r.ID) {
					p.count(PathTakeover)
				}
				o, err := d.Deliver(ctx, b.Token, r)
				if err != nil {
					return err
				}
				p.outcome(r, o)
			}
		}
		s := p.log.Join(p.cfg.Consumer, TransfersTopic)
		for recs := s.Poll(64); len(recs) > 0; recs = s.Poll(64) {
			for _, r := range recs {
				if err := p.process(ctx, c, s, r); err != nil {
					return err
				}
			}
		}
		var left int
		if err := p.db.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE done_at IS NULL AND failed_at IS NULL").Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
	}
	return fmt.Errorf("the outbox still has rows after %d rounds of healing in %s: %s", settleRounds, settleGrace, p.leftRows(ctx))
}

// leftRows describes the rows Settle could not drain, for its error: why
// each was not claimed (a lease, a backoff, or nothing visible) says which
// part of the run held it.
func (p *Pipeline) leftRows(ctx context.Context) string {
	rows, err := p.db.Query(ctx, `
		SELECT id, kind, transfer_id, attempts, failures, coalesce(claimed_by, ''),
		       CASE WHEN isfinite(claimed_until) THEN extract(epoch FROM claimed_until - bank_now()) ELSE 0 END::float8,
		       CASE WHEN isfinite(next_attempt_at) THEN extract(epoch FROM next_attempt_at - bank_now()) ELSE 0 END::float8,
		       coalesce(last_error, '')
		FROM outbox WHERE done_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT 5`)
	if err != nil {
		return fmt.Sprintf("(could not read them: %v)", err)
	}
	var parts []string
	for rows.Next() {
		var id, transfer int64
		var attempts, failures int
		var kind, by, lastErr string
		var lease, next float64
		if err := rows.Scan(&id, &kind, &transfer, &attempts, &failures, &by, &lease, &next, &lastErr); err != nil {
			rows.Close()
			return fmt.Sprintf("(could not read them: %v)", err)
		}
		parts = append(parts, fmt.Sprintf("row %d (%s for transfer %d): %d attempts, %d failures, claimed by %q for %.0fs more, next attempt in %.0fs, last error %q",
			id, kind, transfer, attempts, failures, by, lease, next, lastErr))
	}
	if err := rows.Err(); err != nil {
		return fmt.Sprintf("(could not read them: %v)", err)
	}
	// SKIP LOCKED passes over a row that an open transaction has locked:
	// name the sessions still inside one.
	var open []string
	if orows, err := p.db.Query(ctx, `SELECT state || ': ' || left(query, 120) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`); err == nil {
		open, _ = pgx.CollectRows(orows, pgx.RowTo[string])
	}
	return strings.Join(parts, "; ") + fmt.Sprintf("; %d other sessions in a transaction %q", len(open), open)
}

// Errors returns the unexpected failures of the fault phase, in order.
func (p *Pipeline) Errors() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

// Fired counts the faults that fired, by kind.
func (p *Pipeline) Fired() map[string]int { return p.copy(p.fired) }

// Paths counts the defence paths taken.
func (p *Pipeline) Paths() map[string]int { return p.copy(p.paths) }

func (p *Pipeline) copy(m map[string]int) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
