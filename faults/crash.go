package faults

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

func init() { Register("crash-after-claim", func() Fault { return &CrashAfterClaim{} }) }

// CrashAfterClaim lets the server claim the request's key and then stops it
// cold, before its transaction begins: the key is left in progress. The
// client times out. The stopped server can later be woken (it was only slow,
// and now tries to finish) or killed (it really died).
type CrashAfterClaim struct {
	mu       sync.Mutex
	sleepers []*Sleeper
}

// Name implements Fault.
func (*CrashAfterClaim) Name() string { return "crash-after-claim" }

// Sleeper is a server stopped after claiming a key.
type Sleeper struct {
	Claim   idem.Claim
	claimed chan idem.Claim
	wake    chan bool // true: carry on; false: die
	done    chan CopyResult
	once    sync.Once
	// carried is set by the server itself once it carries on past its
	// claim: the proof that it was woken, not killed.
	carried atomic.Bool
}

// Deliver implements Fault.
func (f *CrashAfterClaim) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	s := &Sleeper{claimed: make(chan idem.Claim, 1), wake: make(chan bool, 1), done: make(chan CopyResult, 1)}
	hooks := idem.Hooks{AfterClaim: func(ctx context.Context, c idem.Claim) {
		s.claimed <- c
		if !<-s.wake {
			// A process that dies runs none of its error handling: the key
			// is not released, the transaction never starts.
			runtime.Goexit()
		}
		s.carried.Store(true)
	}}
	// The server outlives the client's patience, so it must not share the
	// client's context.
	sctx := idem.WithHooks(context.WithoutCancel(ctx), hooks)
	go func() {
		var r CopyResult
		defer func() { s.done <- r }()
		r.Response, r.Err = next(sctx, d.Request)
	}()
	select {
	case c := <-s.claimed:
		s.Claim = c
		f.mu.Lock()
		f.sleepers = append(f.sleepers, s)
		f.mu.Unlock()
		env.strike(f.Name(), LaneServer, "the server claimed the key (fencing token %s) and went silent", c.LockID)
		return bank.Response{}, &NetworkError{Message: "timed out waiting for the response"}
	case r := <-s.done:
		// Nothing to claim (a replay, a 409, a bad key): no crash happened.
		return r.Response, r.Err
	}
}

// Sleepers returns the servers this fault has stopped, oldest first.
func (f *CrashAfterClaim) Sleepers() []*Sleeper {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Sleeper(nil), f.sleepers...)
}

// Wake lets the stopped server carry on and returns what it answers (to no
// one: its client left long ago).
func (s *Sleeper) Wake() (bank.Response, error) {
	s.once.Do(func() { s.wake <- true })
	r := <-s.done
	s.done <- r
	return r.Response, r.Err
}

// CarriedOn reports whether the server carried on past its claim: it was
// woken before it was killed. A killed server's Wake returns too, with
// nothing done.
func (s *Sleeper) CarriedOn() bool { return s.carried.Load() }

// Kill makes the stopped server die where it stands. Safe to call after Wake.
func (s *Sleeper) Kill() {
	s.once.Do(func() { s.wake <- false })
}

// KillAll kills every server still stopped; call it when a run ends.
func (f *CrashAfterClaim) KillAll() {
	for _, s := range f.Sleepers() {
		s.Kill()
	}
}
