package chaos

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
)

// The faults that start goroutines (a duplicate's copies, a server stopped
// after its claim) as the engine drives them: faults' own in a free run;
// in a deterministic run, the same faults with tasks of the scheduler in
// place of goroutines and channels.

// stopper is crash-after-claim: it stops servers after their claim, and
// wakes them (healing) or kills them (the end of a run) later.
type stopper interface {
	faults.Fault
	stopped() []stoppedServer
	KillAll()
}

// stoppedServer is a server stopped after its claim.
type stoppedServer interface {
	lockID() string
	// wake lets it carry on and waits for it to finish; woken reports
	// whether the server itself carried on past its claim (a server killed
	// before its wake did not): what proves the late-server path.
	wake(ctx context.Context) (woken bool, err error)
}

// freeCrash is faults' CrashAfterClaim, for a free run.
type freeCrash struct{ *faults.CrashAfterClaim }

func (f freeCrash) stopped() []stoppedServer {
	var out []stoppedServer
	for _, s := range f.Sleepers() {
		out = append(out, freeSleeper{s})
	}
	return out
}

type freeSleeper struct{ *faults.Sleeper }

func (s freeSleeper) lockID() string { return s.Claim.LockID }

func (s freeSleeper) wake(context.Context) (bool, error) {
	done := make(chan struct{})
	go func() {
		_, _ = s.Wake()
		close(done)
	}()
	select {
	case <-done:
		return s.CarriedOn(), nil
	case <-time.After(attemptTimeout):
		return false, fmt.Errorf("a server stopped after claiming a key (lock %s) was woken and did not finish within %s", s.Claim.LockID, attemptTimeout)
	}
}

// taskCrash is CrashAfterClaim under the scheduler: the server is a task
// that, once it has claimed the key, waits for an event (wake or kill)
// instead of a channel.
type taskCrash struct {
	e  *engine
	g  *group
	mu sync.Mutex
	ss []*taskStopped
}

type taskStopped struct {
	claim           idem.Claim
	claimed, done   *event
	carryOn, dieNow *event
	resp            bank.Response
	err             error
	e               *engine
	// carried: the server carried on past its claim (woken, not killed).
	carried bool
}

func (*taskCrash) Name() string { return FaultCrashAfterClaim }

func (c *taskCrash) Deliver(ctx context.Context, env *faults.Env, d faults.Delivery, next faults.Server) (bank.Response, error) {
	s := c.e.sched
	st := &taskStopped{e: c.e, claimed: s.newEvent(), done: s.newEvent(), carryOn: s.newEvent(), dieNow: s.newEvent()}
	hooks := idem.Hooks{AfterClaim: func(ctx context.Context, cl idem.Claim) {
		st.claim = cl
		st.claimed.fire()
		if s.waitAny(ctx, "to be woken (stopped after its claim)", 0, st.carryOn, st.dieNow) != 0 {
			// A process that dies runs none of its error handling.
			runtime.Goexit()
		}
		st.carried = true
	}}
	// As in faults.CrashAfterClaim: the server outlives its client's
	// patience, and runs with only the hook that stops it.
	sctx := idem.WithHooks(context.WithoutCancel(ctx), hooks)
	s.spawn(sctx, c.e.taskName(ctx, "stopped server"), c.g, func(ctx context.Context) {
		st.resp, st.err = next(ctx, d.Request)
		st.done.fire()
	})
	if s.waitAny(ctx, "its server to claim the key or answer", 0, st.claimed, st.done) == 0 {
		c.mu.Lock()
		c.ss = append(c.ss, st)
		c.mu.Unlock()
		return bank.Response{}, &faults.NetworkError{Message: "timed out waiting for the response"}
	}
	// Nothing to claim (a replay, a 409, a bad key): no crash happened.
	return st.resp, st.err
}

func (c *taskCrash) stopped() []stoppedServer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []stoppedServer
	for _, st := range c.ss {
		out = append(out, st)
	}
	return out
}

// KillAll kills every server still stopped.
func (c *taskCrash) KillAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.ss {
		st.dieNow.fire()
	}
}

func (st *taskStopped) lockID() string { return st.claim.LockID }

func (st *taskStopped) wake(ctx context.Context) (bool, error) {
	st.carryOn.fire()
	st.e.sched.waitAny(ctx, "the woken server to finish", 0, st.done)
	return st.carried, nil
}

// taskDuplicate is faults.Duplicate under the scheduler: the two copies are
// tasks that reach the server in whatever order the schedule says.
type taskDuplicate struct{ e *engine }

func (*taskDuplicate) Name() string { return FaultDuplicate }

func (f *taskDuplicate) Deliver(ctx context.Context, env *faults.Env, d faults.Delivery, next faults.Server) (bank.Response, error) {
	s := f.e.sched
	results := make([]faults.CopyResult, 2)
	copies := s.newGroup()
	for k := range results {
		s.spawn(ctx, f.e.taskName(ctx, fmt.Sprintf("copy %d", k+1)), copies, func(ctx context.Context) {
			resp, err := next(ctx, d.Request)
			results[k] = faults.CopyResult{Response: resp, Err: err}
		})
	}
	_ = copies.wait(ctx, f.e.bound, "the copies")
	return results[0].Response, results[0].Err
}

// taskName names a task that the task under ctx starts: what that one
// works on, and what the new one is.
func (e *engine) taskName(ctx context.Context, what string) string {
	if t := taskFrom(ctx); t != nil && e.sched != nil {
		return t.doing + " " + what
	}
	return what
}

// stageBound bounds a staged race's other side: stageTimeout, or in a
// deterministic run only a bound against hangs.
func (e *engine) stageBound() time.Duration {
	if e.sched != nil {
		return detBound
	}
	return stageTimeout
}

func orNoFault(f string) string {
	if f == "" {
		return "no fault"
	}
	return f
}

// auditSteps is the auditor of a deterministic run: a task that reads every
// balance each AuditSteps steps of the others.
func (e *engine) auditSteps(ctx context.Context) (stop func() error) {
	every := e.cfg.AuditSteps
	if every == 0 {
		every = DefaultAuditSteps
	}
	halt := e.sched.newEvent()
	auditor := e.sched.newGroup()
	var err error
	if every > 0 {
		e.sched.spawn(ctx, "auditor", auditor, func(ctx context.Context) {
			for e.sched.sleepSteps(ctx, every, halt) {
				if err = e.snapshot(ctx); err != nil {
					return
				}
			}
		})
	}
	return func() error {
		halt.fire()
		_ = auditor.wait(ctx, drainTimeout, "the auditor")
		return err
	}
}

// paced makes the wait policy's pauses steps of a deterministic run, and
// its wait a count of them (idem.Hooks.Pause), for every request a server
// copy gets, whatever hooks its fault gave it: a wait in real time would
// last as many polls as the machine's speed allows.
func (e *engine) paced(ctx context.Context) context.Context {
	if e.sched == nil {
		return ctx
	}
	h := idem.HooksFrom(ctx)
	h.Pause = func(ctx context.Context, _ time.Duration) error {
		e.sched.yield(ctx, "wait policy: pause")
		return nil
	}
	return idem.WithHooks(ctx, h)
}

// pipeTasks runs the side effects' pipeline (the outbox's dispatchers and
// the consumer) as tasks of the scheduler (outbox.Sched): they take their
// steps among the clients', and wait, when idle, for a kick (a transfer
// committed, the clock moved, an event published) instead of polling on
// real time.
type pipeTasks struct {
	s *sched
	g *group
	// ctx is the run's task, which stops the pipeline and waits for it.
	ctx  context.Context
	mu   sync.Mutex
	work *event
	halt *event
}

func newPipeTasks(ctx context.Context, s *sched) *pipeTasks {
	return &pipeTasks{s: s, g: s.newGroup(), ctx: ctx, work: s.newEvent(), halt: s.newEvent()}
}

func (p *pipeTasks) Go(ctx context.Context, name string, fn func(ctx context.Context)) {
	p.s.spawn(ctx, name, p.g, fn)
}

func (p *pipeTasks) Step(ctx context.Context, what string) { p.s.yield(ctx, what) }

func (p *pipeTasks) Mark() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.work
}

func (p *pipeTasks) Kick() {
	p.mu.Lock()
	ev := p.work
	p.work = p.s.newEvent()
	p.mu.Unlock()
	ev.fire()
}

func (p *pipeTasks) Idle(ctx context.Context, what string, mark any, steps int) bool {
	ev, _ := mark.(*event)
	if ev == nil {
		ev = p.s.newEvent()
	}
	if steps > 0 {
		return p.s.waitSteps(ctx, what, steps, ev, p.halt) >= 0
	}
	p.s.waitAny(ctx, what, 0, ev, p.halt)
	return !p.s.gaveUp()
}

func (p *pipeTasks) Stop() {
	p.halt.fire()
	_ = p.g.wait(p.ctx, drainTimeout, "the outbox's dispatchers and consumer")
}
