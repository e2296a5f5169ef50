package zoo

import (
	"context"
	"strconv"

	"github.com/banksim/bank-sim/probe"
)

// Users are the lesson's three, as the zoo's tokens and accounts name them.
func Users() []probe.User {
	return []probe.User{
		{Name: "ada", Token: "token-ada", Account: "1"},
		{Name: "bola", Token: "token-bola", Account: "2"},
		{Name: "chidi", Token: "token-chidi", Account: "3"},
	}
}

// Contract is the lesson's, as the zoo serves it: replays byte for byte,
// and no lookup of a key.
func Contract() probe.Contract {
	c := probe.LessonContract()
	c.Lookup = ""
	c.ExactReplays = true
	return c
}

// Balances reads every account of the bank in one snapshot, as a read-only
// SQL source does: a chaos --target run audits the total while transfers
// go on.
func (b *Bank) Balances() probe.Balances { return snapshot{b} }

type snapshot struct{ b *Bank }

func (s snapshot) Read(_ context.Context, ids []probe.ID) (map[probe.ID]int64, error) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	out := map[probe.ID]int64{}
	for _, id := range ids {
		n, err := strconv.ParseInt(string(id), 10, 64)
		if v, ok := s.b.balances[n]; err == nil && ok {
			out[id] = v
		}
	}
	return out, nil
}

func (snapshot) Describe() string { return "the zoo bank's memory, in one snapshot" }
func (snapshot) Close() error     { return nil }
func (snapshot) Consistent() bool { return true }
