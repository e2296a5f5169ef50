package scenarios_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// The whole suite, four scenarios at a time, on banks shared between them
// (as scenario --all runs it): each tells its story with the lesson's
// numbers, transfer ids included, as on a bank of its own, and only as many
// databases are cloned as run at once.
func TestScenariosShareBanksAsOnTheirOwn(t *testing.T) {
	counted := &pgtest.CountedBanks{Databases: banks.OnServer(pgtest.Server(t), banks.Options{})}
	shared, closeBanks := banks.Recycled(counted)
	defer closeBanks()
	const parallel = 4
	var list []scenarios.Scenario
	for _, s := range scenarios.List() {
		// failover runs on a primary and a standby of its own, not on
		// these banks; TestFailoverStory runs it.
		if !s.OwnServers {
			list = append(list, s)
		}
	}
	for _, err := range runAtOnce(list, parallel, func(ctx context.Context, s scenarios.Scenario) error {
		return checkLessonNumbers(ctx, s, shared)
	}) {
		t.Error(err)
	}
	if n := counted.Made.Load(); n > parallel {
		t.Errorf("%d databases cloned for %d scenarios run %d at a time", n, len(list), parallel)
	}
}

// runAtOnce runs fn for every scenario of list, up to parallel at once,
// each bounded by a minute, and returns the errors, each naming its
// scenario.
func runAtOnce(list []scenarios.Scenario, parallel int, fn func(context.Context, scenarios.Scenario) error) []error {
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for _, s := range list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := fn(ctx, s); err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("%s: %w", s.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failures
}

// checkLessonNumbers runs s and says what differs from the lesson.
func checkLessonNumbers(ctx context.Context, s scenarios.Scenario, dbs banks.Databases) error {
	rep, err := scenarios.Execute(ctx, s, dbs, 42, nil)
	if err != nil {
		return err
	}
	var errs []error
	for i, p := range rep.Phases {
		for _, e := range p.Expectations {
			if !e.OK {
				errs = append(errs, fmt.Errorf("%s: expectation failed: %s", p.Title, e.Text))
			}
		}
		if want := lessonBalances[s.Name][i]; want != "" && p.Balances != want {
			errs = append(errs, fmt.Errorf("%s: balances %s, want %s", p.Title, p.Balances, want))
		}
	}
	if !rep.Passed {
		errs = append(errs, errors.New("verdict: "+rep.Verdict))
	}
	return errors.Join(errs...)
}
