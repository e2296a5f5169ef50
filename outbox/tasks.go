package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/banksim/bank-sim/bank"
)

// Sched runs a pipeline's processes as tasks of a deterministic scheduler
// (a deterministic chaos run's) instead of goroutines on real time: one
// process runs at a time, each database statement, provider call, log
// append and poll is a scheduling point, and a process with nothing to do
// waits for something to happen instead of polling a clock.
type Sched interface {
	// Go starts fn as a process called name.
	Go(ctx context.Context, name string, fn func(ctx context.Context))
	// Step is a scheduling point of the process under ctx, before it does
	// what.
	Step(ctx context.Context, what string)
	// Mark is the present moment, for Idle.
	Mark() any
	// Idle waits until Kick has been called since mark, or the pipeline
	// stops; with steps > 0, at most that many steps of the others, or
	// until nothing else can run: then it reports false, as it does when
	// the scheduler has given the run up.
	Idle(ctx context.Context, what string, mark any, steps int) bool
	// Kick tells the idle processes that there may be something to do.
	Kick()
	// Stop wakes every idle process for good and waits until every
	// process has ended.
	Stop()
}

// pauseSteps is how many steps of the others a paused dispatcher whose
// lease has expired waits, at most three times, for another to take its
// first row over: the scheduler's pauseAfterExpiry.
const pauseSteps = 40

// errDispatcherCrash is a dispatcher dying between its send and its mark,
// under a scheduler: a panic that deliverTask recovers, so that the
// process runs nothing more of that delivery.
type dispatcherCrash struct{}

// StartOn starts the dispatchers and the consumer as processes of sc, with
// the faults of the pipeline's config, until Stop. Their fault decisions
// are those of StartPipeline's (a function of the seed, the fault, the row
// or event, and how often it was tried); under a deterministic scheduler
// the processes take them in the same order every time.
func (p *Pipeline) StartOn(ctx context.Context, sc Sched) {
	p.sc = sc
	p.stop = sc.Stop
	p.sms.LoseIf(p.losesAnswer)
	for k := range p.cfg.Dispatchers {
		sc.Go(ctx, fmt.Sprintf("dispatcher-%d", k+1), func(ctx context.Context) { p.dispatchTask(ctx, k) })
	}
	sc.Go(ctx, "consumer", p.consumeTask)
}

// Kick tells the pipeline's idle processes that there may be something to
// do: rows committed to the outbox, a clock that moved past a lease or a
// backoff. Without a scheduler it does nothing (the goroutines poll).
func (p *Pipeline) Kick() {
	if p.sc != nil {
		p.sc.Kick()
	}
}

// dispatchTask is dispatchers k's process under a scheduler: dispatch's
// loop, idle until kicked when it found nothing.
func (p *Pipeline) dispatchTask(ctx context.Context, k int) {
	for gen := 1; p.live(ctx); gen++ {
		tokens := 0
		d := &Dispatcher{DB: p.db, Name: fmt.Sprintf("d%d.%d", k+1, gen), SMS: p.sms, Log: p.log, Flaws: p.cfg.Flaws}
		// A random token would make the outbox differ from run to run.
		d.NewToken = func() string {
			tokens++
			return fmt.Sprintf("%s-%d", d.Name, tokens)
		}
		for p.live(ctx) {
			mark := p.sc.Mark()
			b, err := d.Claim(ctx)
			if err != nil {
				p.fail(err)
				if !p.sc.Idle(ctx, "rows to send, after a failed claim", mark, 0) {
					return
				}
				continue
			}
			if len(b.Rows) == 0 {
				if !p.sc.Idle(ctx, "rows to send", mark, 0) {
					return
				}
				continue
			}
			for _, r := range b.Rows {
				if r.Attempts > 1 && !p.failedBefore(r.ID) {
					p.count(PathTakeover)
				}
			}
			if p.fires(FaultDispatcherPause, fmt.Sprint(b.Rows[0].ID)) {
				p.pauseTask(ctx, b)
			}
			if died := p.deliverTask(ctx, d, b); died {
				break // this dispatcher is dead; the next generation starts
			}
		}
	}
}

// pauseTask is pause under a scheduler: the dispatcher waits until the
// database's clock has passed its lease (only a clock jump of the run moves
// it), then a while for another dispatcher to take its first row over.
func (p *Pipeline) pauseTask(ctx context.Context, b Batch) {
	var until time.Time
	if err := p.db.QueryRow(ctx, "SELECT max(claimed_until) FROM outbox WHERE claim_token = $1", b.Token).Scan(&until); err != nil {
		return
	}
	for p.live(ctx) {
		mark := p.sc.Mark()
		now, err := bank.Now(ctx, p.db)
		if err != nil {
			return
		}
		if now.After(until) {
			break
		}
		if !p.sc.Idle(ctx, "its lease to expire (paused)", mark, 0) {
			return
		}
	}
	for range 3 {
		if !p.live(ctx) {
			return
		}
		mark := p.sc.Mark()
		var taken bool
		err := p.db.QueryRow(ctx, "SELECT coalesce(claim_token, '') <> $2 FROM outbox WHERE id = $1", b.Rows[0].ID, b.Token).Scan(&taken)
		if err != nil || taken {
			return
		}
		if !p.sc.Idle(ctx, "another dispatcher to take its rows over (paused past its lease)", mark, pauseSteps) {
			return
		}
	}
}

// deliverTask is deliver under a scheduler: each send is a step, an event
// published kicks the consumer, and a crash after the send ends the
// dispatcher there.
func (p *Pipeline) deliverTask(ctx context.Context, d *Dispatcher, b Batch) (died bool) {
	for _, r := range b.Rows {
		crash := p.fires(FaultDispatcherCrash, fmt.Sprint(r.ID))
		what := "send the SMS"
		if r.Kind == KindEvent {
			what = "publish the event"
		}
		d.Hooks.BeforeSend = func(ctx context.Context, r Row) { p.sc.Step(ctx, fmt.Sprintf("%s of outbox row %d", what, r.ID)) }
		d.Hooks.AfterSend = func(_ context.Context, r Row) {
			if r.Kind == KindEvent {
				p.sc.Kick() // a record for the consumer
			}
			if crash {
				panic(dispatcherCrash{}) // a process that dies runs nothing more
			}
		}
		o, err, crashed := deliverOne(ctx, d, b.Token, r)
		switch {
		case crashed:
			return true
		case err != nil:
			p.fail(err)
			return true
		}
		p.outcome(r, o)
	}
	return false
}

func deliverOne(ctx context.Context, d *Dispatcher, token string, r Row) (o Outcome, err error, crashed bool) {
	defer func() {
		if x := recover(); x != nil {
			if _, ok := x.(dispatcherCrash); !ok {
				panic(x)
			}
			crashed = true
		}
	}()
	o, err = d.Deliver(ctx, token, r)
	return o, err, false
}

// consumeTask is consume under a scheduler: each poll is a step, and the
// consumer waits to be kicked when the log has nothing for it. After a
// crash the new session waits for a kick too: restarting at once could
// crash again on the same record, for ever, while no one else ran.
func (p *Pipeline) consumeTask(ctx context.Context) {
	for p.live(ctx) {
		c := p.consumer(true)
		between := c.Between
		c.Between = func(ctx context.Context, r Record) error {
			p.sc.Step(ctx, fmt.Sprintf("between the effect and the offset of %s", r.ID))
			return between(ctx, r)
		}
		afterEffect := c.AfterEffect
		c.AfterEffect = func(ctx context.Context, r Record) error {
			p.sc.Step(ctx, fmt.Sprintf("between the effect and the marker of %s", r.ID))
			return afterEffect(ctx, r)
		}
		s := p.log.Join(p.cfg.Consumer, TransfersTopic)
		crashed := false
		for p.live(ctx) && !crashed {
			mark := p.sc.Mark()
			p.sc.Step(ctx, "poll the log")
			recs := s.Poll(16)
			if len(recs) == 0 {
				if !p.sc.Idle(ctx, "events to consume", mark, 0) {
					return
				}
				continue
			}
			for _, r := range recs {
				if err := p.process(ctx, c, s, r); err != nil {
					if !errors.Is(err, errConsumerCrash) {
						p.fail(err)
					}
					crashed = true
					if !p.sc.Idle(ctx, "something new to restart for (crashed)", mark, 0) {
						return
					}
					break
				}
			}
		}
	}
}

// live reports whether the processes go on: not stopped, and the run not
// given up.
func (p *Pipeline) live(ctx context.Context) bool {
	return ctx.Err() == nil && !p.stopping.Load()
}
