package chaos

import (
	"fmt"
	"sort"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
)

// Script is a run's workload written out: the bank it opens, every intent,
// and what each attempt of each intent meets. A run with a Script follows
// it instead of drawing its workload from the seed (the seed still draws
// the fencing tokens and, with PolicyRandom, the interleaving). The
// shrinker edits scripts; a recipe is one.
type Script struct {
	Opening []bank.Account `json:"opening"`
	Intents []ScriptIntent `json:"intents"`
}

// ScriptIntent is one intent of a script: who pays whom how much with which
// key, what the client does around it, and each of its attempts.
type ScriptIntent struct {
	Label   string               `json:"label"`
	UserID  int64                `json:"userId"`
	Key     string               `json:"key"`
	Request bank.TransferRequest `json:"request"`
	// Follower: the client of the intent before it sends it, once that one
	// has its final answer (Planned.Follower).
	Follower bool   `json:"follower,omitempty"`
	Reuse    string `json:"reuse,omitempty"`
	ReuseOf  int    `json:"reuseOf,omitempty"`
	// Repeat: sent once more after its final answer.
	Repeat bool `json:"repeat,omitempty"`
	// AfterCleanup: sent once more after the cleanup job ran.
	AfterCleanup bool `json:"afterCleanup,omitempty"`
	// Attempts are its attempts in order: the fault each meets (in the
	// fault phase) and the server copy it lands on. An attempt past the
	// last one listed lands where the last one did, with no fault.
	Attempts []ScriptAttempt `json:"attempts"`
}

// ScriptAttempt is one attempt of a scripted intent.
type ScriptAttempt struct {
	Fault string `json:"fault,omitempty"`
	// Server is the copy of the server it lands on, from 0.
	Server int `json:"server"`
	// Disconnect is where the client goes away, for FaultDisconnect.
	Disconnect faults.DisconnectPoint `json:"disconnect,omitempty"`
}

func (s *Script) attempt(i, n int) (ScriptAttempt, bool) {
	if i < 0 || i >= len(s.Intents) || n < 1 {
		return ScriptAttempt{}, false
	}
	as := s.Intents[i].Attempts
	if n <= len(as) {
		return as[n-1], true
	}
	if len(as) == 0 {
		return ScriptAttempt{}, false
	}
	return ScriptAttempt{Server: as[len(as)-1].Server}, false
}

func (s *Script) planned(i int) Planned {
	in := s.Intents[i]
	return Planned{Label: in.Label, UserID: in.UserID, Key: in.Key, Request: in.Request,
		Follower: in.Follower, Reuse: in.Reuse, ReuseOf: in.ReuseOf, Repeat: in.Repeat}
}

// layout is the bank of the script: its accounts, owned as they say; the
// active ones are the hot accounts (for the HTTP rig's tokens and tests).
func (s *Script) layout() *layout {
	l := &layout{byID: map[int64]bank.Account{}, owned: map[int64][]int64{}, edges: map[int]int{}, span: len(s.Intents)}
	l.accounts = append([]bank.Account(nil), s.Opening...)
	sort.Slice(l.accounts, func(a, b int) bool { return l.accounts[a].ID < l.accounts[b].ID })
	users := map[int64]bool{}
	for _, a := range l.accounts {
		l.byID[a.ID] = a
		l.owned[a.OwnerID] = append(l.owned[a.OwnerID], a.ID)
		users[a.OwnerID] = true
		if a.Status == "active" {
			l.hot = append(l.hot, a.ID)
		}
	}
	for _, in := range s.Intents {
		users[in.UserID] = true
	}
	for u := range users {
		l.users = append(l.users, u)
	}
	sort.Slice(l.users, func(a, b int) bool { return l.users[a] < l.users[b] })
	return l
}

// Validate says what is wrong with a script, for servers copies of the
// server: a follower with nothing before it, a reuse of an intent that is
// not the one before it, a server that does not exist, an unknown fault.
func (s *Script) Validate(servers int) error {
	if len(s.Intents) == 0 {
		return fmt.Errorf("the script has no intents")
	}
	known := map[string]bool{}
	for _, k := range FaultKinds() {
		known[k] = true
	}
	labels := map[string]bool{}
	ids := map[int64]bool{}
	for _, a := range s.Opening {
		if ids[a.ID] {
			return fmt.Errorf("account %d is opened twice", a.ID)
		}
		ids[a.ID] = true
		if a.BalanceKobo < 0 {
			return fmt.Errorf("account %d opens with a negative balance", a.ID)
		}
	}
	for i, in := range s.Intents {
		if in.Label == "" || labels[in.Label] {
			return fmt.Errorf("intent %d: its label %q is empty or not unique", i, in.Label)
		}
		labels[in.Label] = true
		if in.Follower && i == 0 {
			return fmt.Errorf("%s follows no intent", in.Label)
		}
		if in.Reuse != "" && (!in.Follower || in.ReuseOf != i-1) {
			return fmt.Errorf("%s reuses the key of intent %d; a reuse is sent by the client of the intent just before it, as a follower", in.Label, in.ReuseOf)
		}
		for n, a := range in.Attempts {
			if a.Server < 0 || a.Server >= servers {
				return fmt.Errorf("%s attempt %d lands on server %d; there are %d", in.Label, n+1, a.Server+1, servers)
			}
			if a.Fault != "" && !known[a.Fault] {
				return fmt.Errorf("%s attempt %d: unknown fault %q", in.Label, n+1, a.Fault)
			}
		}
	}
	return nil
}

// ScriptOf writes out the workload of a run of cfg drawn from its seed, as
// h (the run's history) made it: every intent as planned, the fault of each
// fault-phase attempt, and the server copy of every attempt it made.
func ScriptOf(cfg Config, h *History) *Script {
	cfg = cfg.WithDefaults()
	if cfg.Script != nil {
		return cfg.Script.clone()
	}
	l := cfg.layout()
	s := &Script{Opening: append([]bank.Account(nil), l.accounts...)}
	for i := range h.Intents {
		p := cfg.intentIn(l, i)
		in := ScriptIntent{Label: p.Label, UserID: p.UserID, Key: p.Key, Request: p.Request, Follower: p.Follower,
			Reuse: p.Reuse, ReuseOf: p.ReuseOf, Repeat: p.Repeat, AfterCleanup: cfg.RepeatsAfterCleanup(i)}
		made := len(h.Intents[i].Attempts)
		for n := 1; n <= max(made, cfg.MaxAttempts); n++ {
			a := ScriptAttempt{Server: cfg.Instance(i, n)}
			if n <= made {
				a.Server = h.Intents[i].Attempts[n-1].Instance
			}
			if n <= cfg.MaxAttempts {
				a.Fault = cfg.Fault(i, n)
				if a.Fault == FaultDisconnect {
					a.Disconnect = cfg.DisconnectPoint(i, n)
				}
			}
			in.Attempts = append(in.Attempts, a)
		}
		s.Intents = append(s.Intents, in)
	}
	return s
}

func (s *Script) clone() *Script {
	c := &Script{Opening: append([]bank.Account(nil), s.Opening...)}
	for _, in := range s.Intents {
		in.Attempts = append([]ScriptAttempt(nil), in.Attempts...)
		c.Intents = append(c.Intents, in)
	}
	return c
}

// faults counts the attempts of the script that meet a fault.
func (s *Script) faults() int {
	n := 0
	for _, in := range s.Intents {
		for _, a := range in.Attempts {
			if a.Fault != "" {
				n++
			}
		}
	}
	return n
}
