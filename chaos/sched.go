package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The deterministic scheduler (Config.Deterministic).
//
// Every goroutine of a run becomes a task: the run itself, each client, the
// auditor, and every goroutine a fault starts (a duplicate's copies, a late
// request, a server stopped after its claim, the retry that takes a key
// over, the transaction that deadlocks). Exactly one task runs Go code at a
// time: the one holding the token. A task gives the token back at its steps:
// before each SQL statement (the database wrapper, schedDB, makes every
// statement a step), before each attempt, at each backoff and pause, when it
// waits for another task, and when it ends. The scheduler then waits until
// the run is quiescent — every task parked at a step, finished, waiting for
// an event, or blocked inside PostgreSQL on a lock that only a parked task
// can release — and picks the next task to run: at random from the seed, or
// by the default policy and a recipe's preemptions (Interleaving).
//
// A statement that waits for a lock is seen with pg_blocking_pids on the
// backend of the connection it runs on (schedDB knows each connection's pid
// and which task uses it). Once every blocker is a connection that cannot
// move by itself (its task is parked, waiting, or blocked too), the waiting
// task is blocked for good and the token moves on. A COMMIT that releases
// the lock lets the blocked statement go on: its task runs inside PostgreSQL
// without the token until the statement returns, and then parks, before the
// next choice is made. A statement under lock_timeout ends by itself, so it
// is never blocked for good: the scheduler waits for it.
//
// PostgreSQL's own deadlock detector fires after deadlock_timeout of real
// time, and which of two backends in a cycle checks first depends on that
// time. So schedDB sets deadlock_timeout to an hour, and the scheduler finds
// the cycle itself when the run is quiescent: it cancels the statement of
// the task that closed the cycle (the last one blocked), which its
// connection reports as 40P01 deadlock_detected, as PostgreSQL would.
//
// A wait with a timeout (a staged race whose other side never comes) times
// out when nothing else can run. The auditor reads the balances every
// AuditSteps steps. Time in the history is the step count.

// detBound bounds the contexts of a deterministic run: a task may wait for a
// long time, in real time, while others run, and a deadline that fired at a
// real moment would make the run depend on the machine's speed. It is a
// bound against hangs, never a timeout a run relies on.
const detBound = 10 * time.Minute

// detHang is how long the scheduler waits for a running task to reach its
// next step before it gives the run up.
const detHang = time.Minute

// pollBurst is how many times the scheduler asks PostgreSQL, one question
// after the other, whether a watched statement waits for a lock before it
// spaces its questions out.
const pollBurst = 8

// pollGrace is how long after a watched statement was sent the scheduler
// first asks PostgreSQL whether it waits for a lock: most such statements
// wait for none and have been answered by then, unasked. A question costs
// a round trip on another connection, and CPU that the statement itself
// needs (the machine may have 2 cores).
const pollGrace = 250 * time.Microsecond

// firstPoll is the first spacing of the questions after pollBurst; it
// doubles up to 20 ms for a statement that runs on.
const firstPoll = 100 * time.Microsecond

// DefaultAuditSteps is how many scheduler steps pass between two audits of a
// deterministic run when Config.AuditSteps is zero.
const DefaultAuditSteps = 500

// Scheduling policies (Interleaving.Policy).
const (
	// PolicyRandom picks each next task from the ready ones with the seed.
	PolicyRandom = "random"
	// PolicyDefault lets the task that ran last go on while it can, and then
	// the ready task started first: a run with no concurrency but what the
	// preemptions add.
	PolicyDefault = "default"
)

// Interleaving is how a deterministic run picks the next task.
type Interleaving struct {
	// Policy is PolicyRandom (the default) or PolicyDefault.
	Policy string `json:"policy"`
	// Preemptions override the policy at named moments.
	Preemptions []Preemption `json:"preemptions,omitempty"`
}

// Preemption is one choice that a schedule makes against its policy: once
// task Task has stopped How at Step for the N-th time, Run runs next (if it
// is ready then).
type Preemption struct {
	Task string `json:"task"`
	// How is "before" (it reached Step, its next step), "blocked in" (its
	// statement waits for a lock), "waits for" (another task, an event) or
	// "done".
	How  string `json:"how"`
	Step string `json:"step"`
	N    int    `json:"n"`
	Run  string `json:"run"`
}

func (p Preemption) key() string { return stopKey(p.Task, p.How, p.Step, p.N) }

func stopKey(task, how, step string, n int) string {
	return fmt.Sprintf("%s %s %s #%d", task, how, step, n)
}

// Decision is one choice of the scheduler.
type Decision struct {
	Step int `json:"step"`
	// After is the moment it was made at: how the task that ran before
	// stopped (a Preemption's key).
	After string `json:"after"`
	// Ran is the task chosen, At the step it was parked at.
	Ran string `json:"ran"`
	At  string `json:"at"`
	// Default is the task the default policy would have chosen.
	Default string `json:"default"`
	// stop is After, split as a Preemption.
	stop Preemption
}

type taskState int

const (
	taskStarting  taskState = iota // started; not yet at its first step
	taskReady                      // parked at a step, waiting to be chosen
	taskRunning                    // holds the token
	taskSuspended                  // waits for an event, other tasks, a lock, or a timeout
	taskDone
)

var stateNames = [...]string{"starting", "ready", "running", "waiting", "done"}

func (s taskState) String() string { return stateNames[s] }

type task struct {
	id    int
	name  string
	state taskState
	grant chan struct{}
	// label is where the task is: its next step while ready, what it
	// waits for while suspended.
	label string
	// doing is what the task works on, the prefix of its steps' names.
	doing string

	// The statement in flight, if any.
	inflight bool
	// watched: the statement in flight may wait for a lock, and the
	// scheduler asks PostgreSQL whether it does; a statement that cannot
	// (BEGIN, COMMIT, a plain SELECT) is left to answer.
	watched bool
	pid     uint32
	sentAt  time.Time // when the statement was sent
	timed   bool      // under lock_timeout: it ends by itself
	// cancelled: the scheduler cancelled the statement, which waited for
	// a lock held by blockers.
	cancelled bool
	blockers  []uint32
	// inPG: the statement in flight may wait for its lock inside
	// PostgreSQL (waitsInPG); pgWait: it does, blocked by blockers until
	// one of their transactions ends; released: one has, and the
	// statement may be running again.
	inPG, pgWait, released bool

	// A task waiting for a lock waits for one of lockOn's transactions to
	// end (their connections' generations to move on).
	lockOn   []uint32
	lockGens []int
	lockSeq  int
	victim   bool // woken as a deadlock's victim

	// What a suspended task waits for.
	waiting   []*event
	timeout   bool // it gives up when nothing else can run
	stepTimer int  // > 0: ready again at this step
	suspSeq   int
	woke      int // the index of the event that woke it; -1 for its timeout

	group *group
	// stuck fires once the task first waits for a lock, or ends.
	stuck *event
	stops map[string]int
}

// event is a one-shot signal between tasks: a channel closed once when the
// run is free; under the scheduler, a waiter is made ready the moment it is
// fired, so that no choice is ever made without it.
type event struct {
	s       *sched
	ch      chan struct{}
	once    sync.Once
	fired   bool
	waiters []*task
}

// group counts running tasks, as a sync.WaitGroup does.
type group struct {
	s       *sched
	wg      sync.WaitGroup
	n       int
	waiters []*task
}

// dbConn is a connection a task has checked out: schedDB registers it for as
// long as the task holds it, so that a blocker's pid names a task.
type dbConn struct {
	owner *task
	busy  bool // a statement in flight
	timed bool // the transaction set lock_timeout
	// locks: its transaction (or its statement in flight) has sent a
	// statement that takes row locks, which another may wait for.
	locks bool
	// gen moves on each time a transaction on it ends: a task waiting for
	// one of its locks may try again.
	gen int
	// rows are the account rows its transaction has locked, as far as the
	// model knows (schedlocks.go); opaque: it sent a statement on accounts
	// the model does not read.
	rows   map[int64]bool
	opaque bool
}

type sched struct {
	mu      sync.Mutex
	tasks   []*task
	running *task
	last    *task
	step    int
	rng     *rand.Rand
	policy  string
	rules   map[string]string
	conns   map[uint32]*dbConn
	kick    chan struct{}
	poll    *pgxpool.Conn
	lastEnd string
	lastTop Preemption
	digest  hash.Hash
	record  func(Decision)
	seq     int
	err     error
	aborted bool
	abortCh chan struct{}
	closed  bool
	done    chan struct{}
	hang    time.Duration
	// stop cancels the run's context when the scheduler gives it up.
	stop context.CancelCauseFunc
	// polls and cancels count the questions to PostgreSQL about locks and
	// the statements cancelled for one.
	polls, cancels atomic.Int64
	// predicted counts the waits the model of row locks saw coming
	// (schedlocks.go); noLockModel turns it off.
	predicted   atomic.Int64
	noLockModel bool
	// quick is a moving average of how long watched statements that
	// waited for no lock took from send to answer; see graceLocked.
	quick time.Duration
}

// graceLocked is how long after a watched statement was sent the scheduler
// first asks PostgreSQL whether it waits for a lock: what such statements
// that waited for none have lately taken (at least pollGrace, at most
// maxGrace). On a loaded machine they take milliseconds, and questions
// asked at a fixed 250 µs found nothing while taking the CPU the statement
// needed. Measured (seed 3, 20 intents, 4 clients; 3 runs each beside 8
// busy loops): 231-328 questions and 1.21-1.33 s, against 913-1,131 and
// 1.82-2.08 s; quiet, 400 intents at 8 clients: 5.6-6.5 s against
// 5.8-7.8 s. Twice the average asked still less but saw the 1,197 real
// waits of that run too late: 7.4-7.5 s. It changes when the scheduler
// sees a wait, never what it chooses: a run's history is the same.
func (s *sched) graceLocked() time.Duration {
	return min(max(s.quick, pollGrace), maxGrace)
}

// maxGrace bounds graceLocked: a statement that does wait for a lock is
// seen at most this late.
const maxGrace = 5 * time.Millisecond

type taskKey struct{}

func withTask(ctx context.Context, t *task) context.Context {
	return context.WithValue(ctx, taskKey{}, t)
}

func taskFrom(ctx context.Context) *task {
	t, _ := ctx.Value(taskKey{}).(*task)
	return t
}

func newSched(seed uint64, il *Interleaving, poll *pgxpool.Conn, record func(Decision)) *sched {
	s := &sched{
		rng:     rand.New(rand.NewPCG(seed^saltSchedule, 0)),
		policy:  PolicyRandom,
		rules:   map[string]string{},
		conns:   map[uint32]*dbConn{},
		kick:    make(chan struct{}, 1),
		poll:    poll,
		digest:  sha256.New(),
		record:  record,
		abortCh: make(chan struct{}),
		done:    make(chan struct{}),
		hang:    detHang,
	}
	if il != nil {
		if il.Policy != "" {
			s.policy = il.Policy
		}
		for _, p := range il.Preemptions {
			s.rules[p.key()] = p.Run
		}
	}
	return s
}

func (s *sched) newTaskLocked(name string) *task {
	t := &task{id: len(s.tasks), name: name, grant: make(chan struct{}, 1), stops: map[string]int{}}
	t.stuck = &event{s: s}
	s.tasks = append(s.tasks, t)
	return t
}

// adopt makes the calling goroutine the run's first task, holding the token,
// and starts the scheduler. A nil scheduler (a free run) changes nothing.
func (s *sched) adopt(ctx context.Context) context.Context {
	if s == nil {
		return ctx
	}
	s.mu.Lock()
	t := s.newTaskLocked("run")
	t.state, t.doing = taskRunning, "run"
	s.running, s.last = t, t
	s.mu.Unlock()
	go s.loop(ctx)
	return withTask(ctx, t)
}

// close ends the calling task (the run) and the scheduler. Tasks still
// waiting are let go, free.
func (s *sched) close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	if t := taskFrom(ctx); t != nil {
		t.state = taskDone
		if s.running == t {
			s.running = nil
		}
	}
	s.closed = true
	s.abortLocked()
	s.mu.Unlock()
	s.poke()
	<-s.done
	return s.failure()
}

// failure is why the scheduler gave the run up, if it did.
func (s *sched) failure() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// now is the history's clock: nanoseconds in a free run, steps here.
func (s *sched) now() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.step)
}

// steps is how many choices the scheduler made, and the digest of them.
func (s *sched) summary() (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.step, hex.EncodeToString(s.digest.Sum(nil))
}

func (s *sched) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *sched) abortLocked() {
	if !s.aborted {
		s.aborted = true
		close(s.abortCh)
	}
}

// await waits for the token.
func (s *sched) await(t *task) {
	select {
	case <-t.grant:
	case <-s.abortCh:
	}
}

// stopLocked records how the running task t gave the token back: the
// moment the next choice is made at.
func (s *sched) stopLocked(t *task, how, label string) {
	k := how + " " + label
	t.stops[k]++
	s.lastTop = Preemption{Task: t.name, How: how, Step: label, N: t.stops[k]}
	s.lastEnd = s.lastTop.key()
	if s.running == t {
		s.running = nil
	}
}

// spawn runs fn as a new task called name, counted by g. Free, it is a
// goroutine. It returns the task (nil when free).
func (s *sched) spawn(ctx context.Context, name string, g *group, fn func(ctx context.Context)) *task {
	if s == nil {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			fn(ctx)
		}()
		return nil
	}
	s.mu.Lock()
	t := s.newTaskLocked(name)
	t.doing = name
	t.group = g
	g.n++
	s.mu.Unlock()
	ctx = withTask(ctx, t)
	go func() {
		defer s.finish(t)
		s.park(t, "start")
		fn(ctx)
	}()
	return t
}

// finish ends t; runtime.Goexit ends a task this way too.
func (s *sched) finish(t *task) {
	s.mu.Lock()
	if s.running == t {
		s.stopLocked(t, "done", "")
	}
	t.state = taskDone
	if g := t.group; g != nil {
		g.n--
		if g.n == 0 {
			for _, w := range g.waiters {
				s.wakeLocked(w, 0)
			}
			g.waiters = nil
		}
	}
	s.fireLocked(t.stuck)
	s.mu.Unlock()
	s.poke()
}

// park gives the token back at step label and waits until t is chosen again.
func (s *sched) park(t *task, label string) {
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return
	}
	if s.running == t {
		s.stopLocked(t, "before", label)
	}
	t.state, t.label = taskReady, label
	s.mu.Unlock()
	s.poke()
	s.await(t)
}

// yield is a named step of the task under ctx: a scheduling point. Free, it
// does nothing.
func (s *sched) yield(ctx context.Context, step string) {
	if s == nil {
		return
	}
	if t := taskFrom(ctx); t != nil {
		s.park(t, t.doing+": "+step)
	}
}

// sleep pauses for d: real time when free; a step here (nothing waits in
// real time, and the pause lasts however many steps others take).
func (s *sched) sleep(ctx context.Context, d time.Duration, step string) {
	if s == nil {
		time.Sleep(d)
		return
	}
	s.yield(ctx, step)
}

// setDoing names what the task under ctx works on; its steps' names start
// with it.
func (s *sched) setDoing(ctx context.Context, doing string) {
	if s == nil {
		return
	}
	if t := taskFrom(ctx); t != nil {
		s.mu.Lock()
		t.doing = doing
		s.mu.Unlock()
	}
}

func (s *sched) newEvent() *event {
	if s == nil {
		return &event{ch: make(chan struct{})}
	}
	return &event{s: s}
}

func (s *sched) newGroup() *group { return &group{s: s} }

// fire signals ev (once).
func (ev *event) fire() {
	if ev.s == nil {
		ev.once.Do(func() { close(ev.ch) })
		return
	}
	ev.s.mu.Lock()
	ev.s.fireLocked(ev)
	ev.s.mu.Unlock()
	ev.s.poke()
}

func (s *sched) fireLocked(ev *event) {
	if ev.fired {
		return
	}
	ev.fired = true
	for _, w := range ev.waiters {
		if w.state != taskSuspended {
			continue
		}
		for i, x := range w.waiting {
			if x == ev {
				s.wakeLocked(w, i)
				break
			}
		}
	}
	ev.waiters = nil
}

// wakeLocked makes a suspended task ready, woken by its i-th event (-1: its
// timeout).
func (s *sched) wakeLocked(t *task, i int) {
	if t.state != taskSuspended {
		return
	}
	t.state, t.woke = taskReady, i
	t.waiting, t.timeout, t.stepTimer = nil, false, 0
	t.label = "after waiting for " + t.label
}

// suspendLocked parks the running task t until something wakes it.
func (s *sched) suspendLocked(t *task, label string) {
	if s.running == t {
		s.stopLocked(t, "waits for", label)
	}
	s.seq++
	t.state, t.label, t.suspSeq = taskSuspended, label, s.seq
}

// waitAny waits until one of evs fires and returns its index; with timeout,
// it gives up (-1) when nothing else can run (free: after timeout of real
// time). ctx ends a free wait only.
func (s *sched) waitAny(ctx context.Context, what string, timeout time.Duration, evs ...*event) int {
	t := taskFrom(ctx)
	if s == nil || t == nil {
		cases := make([]reflect.SelectCase, 0, len(evs)+2)
		for _, ev := range evs {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ev.ch)})
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
		if timeout > 0 {
			tm := time.NewTimer(timeout)
			defer tm.Stop()
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(tm.C)})
		}
		i, _, _ := reflect.Select(cases)
		if i >= len(evs) {
			return -1
		}
		return i
	}
	s.mu.Lock()
	if i, ready := s.enlistLocked(t, evs); ready {
		s.mu.Unlock()
		return i
	}
	t.timeout = timeout > 0
	s.parkLocked(t, what)
	defer s.mu.Unlock()
	if s.aborted && t.state != taskRunning {
		for i, ev := range evs {
			if ev.fired || ev.ch != nil && isClosed(ev.ch) {
				return i
			}
		}
		return -1
	}
	return t.woke
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleepSteps suspends the task under ctx for n steps of the others, or until
// stop fires; it reports whether the n steps passed.
func (s *sched) sleepSteps(ctx context.Context, n int, stop *event) bool {
	t := taskFrom(ctx)
	s.mu.Lock()
	if stop.fired || s.aborted {
		s.mu.Unlock()
		return false
	}
	stop.waiters = append(stop.waiters, t)
	t.waiting, t.stepTimer = []*event{stop}, s.step+n
	s.parkLocked(t, fmt.Sprintf("%d steps", n))
	defer s.mu.Unlock()
	return !stop.fired && !s.aborted && t.woke == -1
}

// waitSteps waits until one of evs fires (its index), or n steps of the
// others have passed, or nothing else can run (-1).
func (s *sched) waitSteps(ctx context.Context, what string, n int, evs ...*event) int {
	t := taskFrom(ctx)
	s.mu.Lock()
	if i, ready := s.enlistLocked(t, evs); ready {
		s.mu.Unlock()
		return i
	}
	t.stepTimer, t.timeout = s.step+n, true
	s.parkLocked(t, what)
	defer s.mu.Unlock()
	if s.aborted && t.state != taskRunning {
		return -1
	}
	return t.woke
}

// enlistLocked begins the running task t's wait for one of evs, with s.mu
// held: if one has fired already it returns its index, or -1 if the run has
// been given up, and true (no need to wait); else it makes t a waiter of
// each of evs.
func (s *sched) enlistLocked(t *task, evs []*event) (int, bool) {
	for i, ev := range evs {
		if ev.fired {
			return i, true
		}
	}
	if s.aborted {
		return -1, true
	}
	for _, ev := range evs {
		ev.waiters = append(ev.waiters, t)
	}
	t.waiting = evs
	return 0, false
}

// parkLocked suspends the running task t, waiting for what, and gives the
// token to the others until t gets it back (or the run is given up); s.mu
// is held before and after, released meanwhile.
func (s *sched) parkLocked(t *task, what string) {
	s.suspendLocked(t, what)
	s.mu.Unlock()
	s.poke()
	s.await(t)
	s.mu.Lock()
}

// gaveUp reports whether the scheduler has given the run up.
func (s *sched) gaveUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// wait waits until every task of g has ended. Free, it gives up after bound
// with an error saying what it waited for.
func (g *group) wait(ctx context.Context, bound time.Duration, what string) error {
	s := g.s
	t := taskFrom(ctx)
	if s == nil || t == nil {
		return waitGroup(&g.wg, bound, what)
	}
	s.mu.Lock()
	if g.n == 0 || s.aborted {
		s.mu.Unlock()
		if s.aborted {
			return waitGroup(&g.wg, bound, what)
		}
		return nil
	}
	g.waiters = append(g.waiters, t)
	s.suspendLocked(t, what)
	s.mu.Unlock()
	s.poke()
	s.await(t)
	return nil
}

// add and done count work that is not a task (a late request on the wire,
// in a free HTTP run).
func (g *group) add()  { g.wg.Add(1) }
func (g *group) done() { g.wg.Done() }

// untilBlocked waits until u waits for a lock (or has ended): the moment a
// staged race needs its other side to be waiting.
func (s *sched) untilBlocked(ctx context.Context, u *task) {
	s.waitAny(ctx, u.name+" to wait for a lock", 0, u.stuck)
}

// register and unregister record which task holds a connection.
func (s *sched) register(pid uint32, t *task) {
	s.mu.Lock()
	s.conns[pid] = &dbConn{owner: t}
	s.mu.Unlock()
}

func (s *sched) unregister(pid uint32) {
	s.mu.Lock()
	s.txEndedLocked(pid)
	delete(s.conns, pid)
	s.mu.Unlock()
}

// txEndedLocked moves pid's generation on: the tasks waiting for one of its
// locks may try again.
func (s *sched) txEndedLocked(pid uint32) {
	c := s.conns[pid]
	if c == nil {
		return
	}
	c.gen++
	c.timed, c.locks = false, false
	c.rows, c.opaque = nil, false
	for _, t := range s.tasks {
		if t.pgWait && slicesContains(t.blockers, pid) {
			t.released = true
		}
	}
	for _, t := range s.tasks {
		if t.state == taskSuspended && t.lockOn != nil {
			for _, p := range t.lockOn {
				if p == pid {
					s.wakeLocked(t, 0)
					break
				}
			}
		}
	}
}

// inflight marks t's statement as sent on pid; locks when it takes row
// locks, and so may wait for one (canWait); inPG when it may wait for one
// inside PostgreSQL rather than be cancelled (waitsInPG). The scheduler
// watches it only when another connection holds row locks: with none held,
// it cannot wait, and no one asks PostgreSQL about it.
func (s *sched) inflight(t *task, pid uint32, locks, inPG bool) {
	s.mu.Lock()
	t.inflight, t.pid, t.cancelled, t.blockers = true, pid, false, nil
	t.sentAt = time.Now()
	t.inPG, t.pgWait, t.released = inPG, false, false
	t.timed = false
	t.watched = locks && s.othersHoldLocksLocked(pid)
	if c := s.conns[pid]; c != nil {
		c.owner, c.busy = t, true
		c.locks = c.locks || locks
		t.timed = c.timed
	}
	watched := t.watched
	s.mu.Unlock()
	if watched {
		s.poke() // ask about it now, not at the scheduler's next tick
	}
}

// othersHoldLocksLocked reports whether a connection other than pid holds
// row locks, or may: one whose transaction sent a statement that takes them,
// or one the scheduler does not know.
func (s *sched) othersHoldLocksLocked(pid uint32) bool {
	for p, c := range s.conns {
		if p != pid && (c.locks || c.owner == nil) {
			return true
		}
	}
	return false
}

// returned marks t's statement on pid as answered; endsTx when it ended a
// transaction (COMMIT, ROLLBACK). It reports, with the statement's
// blockers, whether the scheduler cancelled it because it waited for a lock
// that only another task can release.
func (s *sched) returned(t *task, pid uint32, err error, endsTx bool) (blockers []uint32, cancelled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.watched && !t.cancelled && !t.pgWait && !t.released && len(t.blockers) == 0 {
		// An exponential moving average, 1/8 for the newest.
		d := time.Since(t.sentAt)
		if s.quick == 0 {
			s.quick = d
		} else {
			s.quick += (d - s.quick) / 8
		}
	}
	t.inflight = false
	if t.pgWait {
		// It waited inside PostgreSQL, suspended, and has its answer: it
		// parks here, before its Go code goes on, until it is chosen.
		t.pgWait, t.released, t.inPG = false, false, false
		t.state, t.label = taskReady, "after waiting for a lock in PostgreSQL"
		defer func() {
			s.mu.Unlock()
			s.poke()
			s.await(t)
			s.mu.Lock()
		}()
	}
	if c := s.conns[pid]; c != nil {
		c.busy = false
	}
	cancelled, blockers = t.cancelled, t.blockers
	t.cancelled, t.blockers = false, nil
	if cancelled && !isCancel(err) {
		cancelled = false // it had ended another way before the cancel came
	}
	if endsTx {
		s.txEndedLocked(pid)
	}
	return blockers, cancelled
}

// setTimed marks the transaction on pid as running under lock_timeout.
func (s *sched) setTimed(pid uint32) {
	s.mu.Lock()
	if c := s.conns[pid]; c != nil {
		c.timed = true
	}
	s.mu.Unlock()
}

// waitLock suspends t until the transaction of one of blockers has ended
// (then it sends its statement again), or until the scheduler makes it a
// deadlock's victim (true).
func (s *sched) waitLock(t *task, blockers []uint32, what string) (victim bool) {
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return false
	}
	var on []uint32
	var gens []int
	var owners []string
	for _, b := range blockers {
		if c := s.conns[b]; c != nil {
			on, gens = append(on, b), append(gens, c.gen)
			owners = append(owners, c.owner.name)
		}
	}
	if len(on) == 0 {
		s.mu.Unlock()
		return false // its blockers are gone already: try again
	}
	t.lockOn, t.lockGens, t.lockSeq, t.victim = on, gens, s.seqNext(), false
	s.suspendLocked(t, fmt.Sprintf("a lock of %s (%s)", strings.Join(owners, ", "), what))
	s.fireLocked(t.stuck)
	s.mu.Unlock()
	s.poke()
	s.await(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	victim = t.victim
	t.lockOn, t.lockGens, t.victim = nil, nil, false
	return victim
}

// ErrDeadlockVictim marks the error of a statement the deterministic
// scheduler made a deadlock's victim.
var ErrDeadlockVictim = errors.New("deadlock detected by bank-sim's deterministic scheduler")

func (s *sched) quiescentLocked() bool {
	if s.running != nil {
		return false
	}
	for _, t := range s.tasks {
		if t.state == taskStarting || t.released {
			return false
		}
	}
	return true
}

func slicesContains(xs []uint32, x uint32) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// otherWaitsInPGLocked reports whether another task waits inside
// PostgreSQL: one COMMIT could release both (directly, or through the
// queue for a row), and they would race there.
func (s *sched) otherWaitsInPGLocked(t *task) bool {
	for _, u := range s.tasks {
		if u != t && u.pgWait {
			return true
		}
	}
	return false
}

// stableLocked reports whether every blocker of the running task t is a
// connection of another task, which cannot move until it is chosen.
func (s *sched) stableLocked(t *task, blockers []uint32) bool {
	if len(blockers) == 0 {
		return false
	}
	for _, b := range blockers {
		c := s.conns[b]
		if c != nil && c.owner != nil && c.owner != t && c.busy && c.owner.pgWait && !c.owner.released {
			continue // waits inside PostgreSQL for a parked task: it cannot move by itself
		}
		if c == nil || c.owner == nil || c.owner == t || c.busy {
			// A connection on its way out, t's own (under lock_timeout),
			// or a statement in flight: it may end by itself.
			return false
		}
	}
	return true
}

// blockers asks PostgreSQL which backends pid waits for.
func (s *sched) blockers(ctx context.Context, pid uint32) ([]uint32, error) {
	var bs []int32
	if err := s.poll.QueryRow(ctx, "SELECT coalesce(pg_blocking_pids($1), '{}')", int32(pid)).Scan(&bs); err != nil {
		return nil, fmt.Errorf("ask PostgreSQL whether a statement waits for a lock: %w", err)
	}
	out := make([]uint32, len(bs))
	for i, b := range bs {
		out[i] = uint32(b)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out, nil
}

// loop makes the choices. It runs from adopt to close.
func (s *sched) loop(ctx context.Context) {
	defer close(s.done)
	pollDelay, polls := firstPoll, 0
	lastChange := time.Now()
	for {
		s.mu.Lock()
		if s.aborted {
			s.mu.Unlock()
			return
		}
		if !s.quiescentLocked() {
			r := s.running
			watch := r != nil && r.inflight && r.watched && !r.timed && !r.cancelled
			released := false
			if r == nil {
				// A statement released inside PostgreSQL: does it wait
				// again, or is it on its way back?
				for _, t := range s.tasks {
					if t.released && t.inflight {
						r, watch, released = t, true, true
						break
					}
				}
			}
			var pid uint32
			var sent time.Time
			grace := s.graceLocked()
			if watch {
				pid, sent = r.pid, r.sentAt
			}
			s.mu.Unlock()
			if !watch {
				// Nothing to ask PostgreSQL about: the running task (or
				// the one starting) pokes when it stops.
				if !s.awaitKick(ctx, lastChange) {
					return
				}
				pollDelay, polls, lastChange = firstPoll, 0, time.Now()
				continue
			}
			if polls == 0 && !released {
				// Most watched statements wait for no lock and return
				// within a round trip or two: asking PostgreSQL about
				// them only slows them down. The first question comes
				// a grace after the statement was sent (graceLocked).
				if kicked, waited, gone := s.napUntil(ctx, sent.Add(grace)); kicked {
					pollDelay, polls, lastChange = firstPoll, 0, time.Now()
					continue
				} else if waited || gone {
					continue // is it still running? (or the run is over)
				}
			}
			if polls < pollBurst {
				// A statement still running after the grace often waits
				// for a lock: the next questions go one after the other,
				// without a timer (Go's, below a millisecond, may fire a
				// millisecond late).
				select {
				case <-s.kick:
					pollDelay, polls, lastChange = firstPoll, 0, time.Now()
					continue
				case <-ctx.Done():
					s.give(ctx.Err())
					return
				default:
				}
			} else {
				timer := time.NewTimer(pollDelay)
				select {
				case <-s.kick:
					timer.Stop()
					pollDelay, polls, lastChange = firstPoll, 0, time.Now()
					continue
				case <-ctx.Done():
					timer.Stop()
					s.give(ctx.Err())
					return
				case <-timer.C:
				}
			}
			if time.Since(lastChange) > s.hang {
				s.give(s.hangError())
				return
			}
			// Only a statement still running after the first questions is
			// asked less and less often.
			if polls++; polls >= pollBurst {
				pollDelay = min(pollDelay*2, 20*time.Millisecond)
			}
			if err := s.cancelIfBlocked(ctx, r, pid); err != nil {
				s.give(err)
				return
			}
			continue
		}
		if v := s.deadlockVictimLocked(); v != nil {
			v.victim = true
			s.wakeLocked(v, -2)
			s.mu.Unlock()
			continue
		}
		for _, t := range s.tasks {
			if t.state == taskSuspended && t.stepTimer > 0 && t.stepTimer <= s.step {
				s.wakeLocked(t, -1)
			}
		}
		var ready []*task
		for _, t := range s.tasks {
			if t.state == taskReady {
				ready = append(ready, t)
			}
		}
		if len(ready) == 0 {
			if t := s.firstTimeoutLocked(); t != nil {
				s.wakeLocked(t, -1)
				s.mu.Unlock()
				continue
			}
			if s.closed {
				s.mu.Unlock()
				return
			}
			err := s.stuckLocked()
			s.mu.Unlock()
			s.give(err)
			return
		}
		s.chooseLocked(ready)
		s.mu.Unlock()
		pollDelay, polls, lastChange = firstPoll, 0, time.Now()
	}
}

// awaitKick waits for a poke; false when the run is over (given up: the
// context ended, or nothing happened for s.hang since lastChange).
func (s *sched) awaitKick(ctx context.Context, lastChange time.Time) bool {
	timer := time.NewTimer(max(s.hang-time.Since(lastChange), 0))
	defer timer.Stop()
	select {
	case <-s.kick:
		return true
	case <-ctx.Done():
		s.give(ctx.Err())
		return false
	case <-timer.C:
		s.give(s.hangError())
		return false
	}
}

// napUntil waits until deadline (waited): kicked when a poke came first,
// gone when the run was given up. Go's timers, below a millisecond, may fire a
// millisecond late; a goroutine's nanosleep does not. A poke (the task
// answered, and parked at its next step) ends the wait at once, as the
// handover to the next task should not wait for the deadline.
func (s *sched) napUntil(ctx context.Context, deadline time.Time) (kicked, waited, gone bool) {
	d := time.Until(deadline)
	if d <= 0 {
		return false, false, false
	}
	alarm := make(chan struct{}, 1)
	go func() {
		ts := syscall.NsecToTimespec(int64(d))
		for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
		}
		alarm <- struct{}{}
	}()
	select {
	case <-s.kick:
		return true, false, false
	case <-ctx.Done():
		return false, false, true
	case <-s.abortCh:
		return false, false, true
	case <-alarm:
		return false, true, false
	}
}

// cancelIfBlocked asks PostgreSQL whether the running task's statement on
// pid waits for a lock that only other tasks can release; if it does, it
// cancels the statement, and the task will wait for them as a task waits,
// then send it again. No statement is ever left queued inside PostgreSQL:
// a COMMIT that released two queued waiters would let them race each other
// there, and the race would decide the run.
func (s *sched) cancelIfBlocked(ctx context.Context, r *task, pid uint32) error {
	s.polls.Add(1)
	bs, err := s.blockers(ctx, pid)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if r.released {
		if r.inflight && r.pid == pid && s.stableLocked(r, bs) {
			r.released, r.blockers = false, bs // blocked again
		}
		s.mu.Unlock()
		return nil
	}
	cancel := r.inflight && r.pid == pid && !r.cancelled && !r.timed && s.stableLocked(r, bs)
	if cancel && r.inPG && !s.otherWaitsInPGLocked(r) {
		// It waits inside PostgreSQL, as it would in production: the
		// transaction that ends first lets it go on with what it read.
		r.pgWait, r.blockers = true, bs
		s.suspendLocked(r, "a lock, inside PostgreSQL")
		s.fireLocked(r.stuck)
		s.mu.Unlock()
		s.poke()
		return nil
	}
	if cancel {
		r.cancelled, r.blockers = true, bs
	}
	s.mu.Unlock()
	if !cancel {
		return nil
	}
	s.cancels.Add(1)
	if _, err := s.poll.Exec(ctx, "SELECT pg_cancel_backend($1)", int32(pid)); err != nil {
		return fmt.Errorf("cancel a statement that waits for a lock: %w", err)
	}
	return nil
}

// give gives the run up: every task goes on freely, and the run reports err.
// The backends of the tasks' connections are terminated, so that no
// statement waits for a lock that no one will release (deadlock_timeout is
// an hour): the run ends at once, with errors, instead of hanging.
func (s *sched) give(err error) {
	s.mu.Lock()
	if s.err == nil && err != nil && !s.closed {
		s.err = err
	}
	s.abortLocked()
	if s.stop != nil {
		s.stop(s.err)
	}
	var pids []int32
	for pid := range s.conns {
		pids = append(pids, int32(pid))
	}
	s.mu.Unlock()
	if len(pids) > 0 && s.poll != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = s.poll.Exec(ctx, "SELECT pg_terminate_backend(p) FROM unnest($1::int4[]) AS p", pids)
	}
}

func (s *sched) seqNext() int {
	s.seq++
	return s.seq
}

// deadlockVictimLocked finds a cycle of tasks each waiting for a lock of
// the next, and returns the one that closed it (the last to wait), as
// PostgreSQL aborts the transaction whose wait closed a cycle.
func (s *sched) deadlockVictimLocked() *task {
	waitsFor := func(t *task) []*task {
		var out []*task
		for _, b := range t.lockOn {
			if c := s.conns[b]; c != nil && c.owner != nil && c.owner.state == taskSuspended && c.owner.lockOn != nil {
				out = append(out, c.owner)
			}
		}
		return out
	}
	for _, start := range s.tasks {
		if start.state != taskSuspended || start.lockOn == nil {
			continue
		}
		path := []*task{start}
		seen := map[*task]bool{start: true}
		var dfs func(t *task) []*task
		dfs = func(t *task) []*task {
			for _, u := range waitsFor(t) {
				if u == start {
					return append([]*task(nil), path...)
				}
				if seen[u] {
					continue
				}
				seen[u] = true
				path = append(path, u)
				if c := dfs(u); c != nil {
					return c
				}
				path = path[:len(path)-1]
			}
			return nil
		}
		if cycle := dfs(start); cycle != nil {
			v := cycle[0]
			for _, t := range cycle {
				if t.lockSeq > v.lockSeq {
					v = t
				}
			}
			return v
		}
	}
	return nil
}

func (s *sched) firstTimeoutLocked() *task {
	var first *task
	for _, t := range s.tasks {
		if t.state == taskSuspended && t.timeout && (first == nil || t.suspSeq < first.suspSeq) {
			first = t
		}
	}
	return first
}

// stuckLocked describes a run in which no task can go on.
func (s *sched) stuckLocked() error {
	var lines []string
	for _, t := range s.tasks {
		if t.state == taskDone {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: %s (%s)", t.name, t.state, t.label))
	}
	return fmt.Errorf("deterministic run: no task can go on after step %d:\n  %s", s.step, strings.Join(lines, "\n  "))
}

func (s *sched) hangError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for _, t := range s.tasks {
		if t.state == taskRunning || t.state == taskStarting {
			lines = append(lines, fmt.Sprintf("%s: %s (%s)", t.name, t.state, t.label))
		}
	}
	return fmt.Errorf("deterministic run: no task reached its next step for %s after step %d:\n  %s", s.hang, s.step, strings.Join(lines, "\n  "))
}

// chooseLocked picks the next task from ready (in the order tasks started)
// and gives it the token.
func (s *sched) chooseLocked(ready []*task) {
	def := ready[0]
	for _, t := range ready {
		if t == s.last {
			def = t
		}
	}
	pick := def
	if s.policy == PolicyRandom && len(ready) > 1 {
		// No draw for a choice that is none: the steps of a lone task
		// (the run opening its accounts) leave the seed's choices as they
		// are, so that a bank with fewer accounts is scheduled alike.
		pick = ready[s.rng.IntN(len(ready))]
	}
	if name, ok := s.rules[s.lastEnd]; ok {
		for _, t := range ready {
			if t.name == name {
				pick = t
			}
		}
	}
	s.step++
	d := Decision{Step: s.step, After: s.lastEnd, Ran: pick.name, At: pick.label, Default: def.name, stop: s.lastTop}
	fmt.Fprintf(s.digest, "%d\t%s\t%s\t%s\n", d.Step, d.After, d.Ran, d.At)
	if s.record != nil {
		s.record(d)
	}
	pick.state = taskRunning
	s.running, s.last = pick, pick
	pick.grant <- struct{}{}
}

// isCancel reports whether err is PostgreSQL's query_canceled (57014).
func isCancel(err error) bool {
	return bank.SQLState(err) == "57014"
}
