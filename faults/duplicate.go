package faults

import (
	"context"
	"sync"

	"github.com/banksim/bank-sim/bank"
)

func init() { Register("duplicate", func() Fault { return &Duplicate{Copies: 2} }) }

// Duplicate delivers several copies of one request at the same moment: a
// double tap, or a proxy that retried too eagerly. The copies start together
// behind a barrier, each on its own goroutine, so on a connection pool they
// truly overlap inside PostgreSQL. The client sees the first copy's answer.
type Duplicate struct {
	Copies int `json:"copies"`
	// Observe, when set, receives every copy's outcome once all have finished.
	Observe func(copies []CopyResult)
}

// CopyResult is what one copy got from the server.
type CopyResult struct {
	Response bank.Response
	Err      error
}

// Name implements Fault.
func (*Duplicate) Name() string { return "duplicate" }

// Deliver implements Fault.
func (f *Duplicate) Deliver(ctx context.Context, env *Env, d Delivery, next Server) (bank.Response, error) {
	n := max(f.Copies, 2)
	results := make([]CopyResult, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := next(ctx, d.Request)
			results[i] = CopyResult{resp, err}
		}()
	}
	close(start)
	wg.Wait()
	if f.Observe != nil {
		f.Observe(results)
	}
	env.strike(f.Name(), LaneNetwork, "%d copies reached the server at the same moment", n)
	return results[0].Response, results[0].Err
}
