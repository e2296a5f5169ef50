// Package faults is an in-process network between a client and the transfer
// handler that fails on purpose: it loses responses, drops requests, delivers
// duplicates, lets a server go silent after claiming a key, and adds delay.
// Each fault is a small type in a file of its own, registered by name; every
// random choice comes from the network's seeded generator.
//
// Proxy does the same on real sockets: a TCP proxy on 127.0.0.1 between an
// HTTP client and the server, whose connection faults (conn_*.go, registered
// with RegisterConn) drop the connection after the commit, reset it before
// the request arrives, hold the answer past the client's timeout, answer 503
// from the middle, add latency, or cut the body short.
package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// Server is the far end of the network: the transfer handler.
type Server func(ctx context.Context, req idem.Request) (bank.Response, error)

// Delivery is one attempt on its way to the server.
type Delivery struct {
	Attempt int // 1 for the first try of an intent
	Intent  string
	Request idem.Request
}

// Fault changes how one delivery travels. It calls next zero, one or more
// times, and decides what the client sees.
type Fault interface {
	// Name is the fault's registered name.
	Name() string
	// Deliver carries d to next, failing in its own way.
	Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error)
}

// Env is what a fault may use: the run's seeded generator, its clock and a
// place to report what happened on the server's side.
type Env struct {
	Clock *Clock
	// Note records something the client cannot see (e.g. "the server
	// committed transfer 1, then the response was lost"). May be nil.
	Note func(format string, args ...any)
	// Struck, when set, hears where each fault struck and what it did there,
	// instead of Note: pictures of a run mark the spot. May be nil.
	Struck func(Strike)

	mu  sync.Mutex
	rng *rand.Rand
}

// NewEnv returns an Env whose random choices all come from seed.
func NewEnv(seed uint64, clock *Clock) *Env {
	return &Env{Clock: clock, rng: rand.New(rand.NewPCG(seed, 0x6e6574))}
}

// Float64 draws from the seeded generator; safe for concurrent use.
func (e *Env) Float64() float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.Float64()
}

// Int64N draws from the seeded generator; safe for concurrent use.
func (e *Env) Int64N(n int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rng.Int64N(n)
}

func (e *Env) note(format string, args ...any) {
	if e.Note != nil {
		e.Note(format, args...)
	}
}

// Lanes of a picture of a run: where a fault strikes.
const (
	LaneNetwork  = "network"  // between the client and the server
	LaneServer   = "server"   // inside the server process
	LaneDatabase = "database" // inside the server's transaction
)

// Strike is one fault striking: which, where (a Lane…) and what it did.
type Strike struct {
	Fault, Lane, Text string
}

// strike reports what fault did at lane, to Struck, or else to Note.
func (e *Env) strike(fault, lane, format string, args ...any) {
	if e.Struck != nil {
		e.Struck(Strike{Fault: fault, Lane: lane, Text: fmt.Sprintf(format, args...)})
		return
	}
	e.note(format, args...)
}

// ErrNoResponse is what a client sees when its request may or may not have
// been processed: a timeout, a reset connection. It cannot tell which.
var ErrNoResponse = errors.New("no response")

// NetworkError is a failure the client sees instead of a response.
type NetworkError struct {
	Message string // what the client saw, e.g. "timed out waiting for the response"
}

func (e *NetworkError) Error() string        { return e.Message }
func (e *NetworkError) Is(target error) bool { return target == ErrNoResponse }

var (
	registryMu sync.Mutex
	registry   = map[string]func() Fault{}
)

// Register makes a fault available by name. Each fault file registers itself.
func Register(name string, make func() Fault) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("faults: " + name + " registered twice")
	}
	registry[name] = make
}

// New returns a fresh fault by name.
func New(name string) (Fault, error) {
	registryMu.Lock()
	make, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown fault %q (known: %v)", name, Names())
	}
	return make(), nil
}

// Names lists the registered faults, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
