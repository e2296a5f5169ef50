package faults

import (
	"context"
	"slices"
	"sync"

	"github.com/banksim/bank-sim/bank"
)

// Rule says when a fault fires: on which attempts (all when empty) and with
// what probability (always when zero).
type Rule struct {
	Fault       Fault
	Attempts    []int
	Probability float64
}

// Network carries deliveries to a server through the faults its rules pick.
// It is safe for concurrent use.
type Network struct {
	Server Server
	Env    *Env

	mu        sync.Mutex
	rules     []Rule
	overrides []Rule
	fired     map[string]int
}

// NewNetwork returns a network to server whose random choices come from seed.
func NewNetwork(server Server, seed uint64, clock *Clock) *Network {
	return &Network{
		Server: server,
		Env:    NewEnv(seed, clock),
		fired:  map[string]int{},
	}
}

// Inject adds a rule.
func (n *Network) Inject(r Rule) *Network {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.rules = append(n.rules, r)
	return n
}

// Override adds rules that take precedence over every other, and silence the
// other rules of the same fault: a live experiment's "this fault, on these
// attempts, instead of the story's".
func (n *Network) Override(rules ...Rule) *Network {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.overrides = append(n.overrides, rules...)
	return n
}

// On is a shorthand for a fault that always fires on the given attempts.
func (n *Network) On(f Fault, attempts ...int) *Network {
	return n.Inject(Rule{Fault: f, Attempts: attempts})
}

// Fired reports how often each fault fired.
func (n *Network) Fired() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]int, len(n.fired))
	for k, v := range n.fired {
		out[k] = v
	}
	return out
}

// Send delivers d, through the first rule that fires for it.
func (n *Network) Send(ctx context.Context, d Delivery) (bank.Response, error) {
	ctx = bank.WithIntent(ctx, d.Intent)
	if f := n.pick(d); f != nil {
		return f.Deliver(ctx, n.Env, d, n.Server)
	}
	return n.Server(ctx, d.Request)
}

func (n *Network) pick(d Delivery) Fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	overridden := map[string]bool{}
	for _, r := range n.overrides {
		overridden[r.Fault.Name()] = true
	}
	for i, r := range append(slices.Clip(n.overrides), n.rules...) {
		if i >= len(n.overrides) && overridden[r.Fault.Name()] {
			continue
		}
		if len(r.Attempts) > 0 && !slices.Contains(r.Attempts, d.Attempt) {
			continue
		}
		// Draw only for probabilistic rules, so that adding a certain fault
		// does not shift every later random choice.
		if r.Probability > 0 && n.Env.Float64() >= r.Probability {
			continue
		}
		n.fired[r.Fault.Name()]++
		return r.Fault
	}
	return nil
}
