package scenarios_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// lessonStories are the lesson's own nine stories, the ones its scripts
// tell (issue 11 compares bank-sim with them).
var lessonStories = []string{"partial-failure", "rules", "lost-response", "key-misuse", "double-tap",
	"crash-takeover", "http-tunnel", "retry-policy", "key-cleanup"}

// BenchmarkScenarioSuite runs every scenario, four at a time on shared
// banks, as `bank-sim scenario --all` does once PostgreSQL is up: one op is
// the whole suite.
//
//	go test -run '^$' -bench BenchmarkScenarioSuite -benchtime 10x ./scenarios
func BenchmarkScenarioSuite(b *testing.B) {
	benchSuite(b, scenarios.List())
}

// BenchmarkLessonStories is BenchmarkScenarioSuite for the lesson's nine
// stories alone.
func BenchmarkLessonStories(b *testing.B) {
	var list []scenarios.Scenario
	for _, name := range lessonStories {
		s, ok := scenarios.Get(name)
		if !ok {
			b.Fatalf("no scenario %s", name)
		}
		list = append(list, s)
	}
	benchSuite(b, list)
}

func benchSuite(b *testing.B, list []scenarios.Scenario) {
	shared, closeBanks := banks.Recycled(banks.OnServer(pgtest.Server(b), banks.Options{}))
	defer closeBanks()
	b.ReportMetric(float64(len(list)), "scenarios")
	for b.Loop() {
		for _, err := range runAtOnce(list, 4, func(ctx context.Context, s scenarios.Scenario) error {
			rep, err := scenarios.Execute(ctx, s, shared, 42, nil)
			if err == nil && !rep.Passed {
				err = fmt.Errorf("%s", rep.Verdict)
			}
			return err
		}) {
			b.Error(err)
		}
	}
}

// BenchmarkScenarioFixedCost is what a scenario costs beyond its own work:
// a story of one phase that does nothing, on a shared bank, so one op is
// the bank's reset, the ledger read and the invariants.
func BenchmarkScenarioFixedCost(b *testing.B) {
	shared, closeBanks := banks.Recycled(banks.OnServer(pgtest.Server(b), banks.Options{}))
	defer closeBanks()
	empty := scenarios.Scenario{Name: "nothing", Summary: "a phase that does nothing",
		Phases: []scenarios.Phase{{Title: "nothing", Run: func(context.Context, *scenarios.Run) error { return nil }}}}
	ctx := context.Background()
	if _, err := scenarios.Execute(ctx, empty, shared, 42, nil); err != nil { // the bank's clone, outside the timing
		b.Fatal(err)
	}
	for b.Loop() {
		rep, err := scenarios.Execute(ctx, empty, shared, 42, nil)
		if err != nil || !rep.Passed {
			b.Fatalf("%v %s", err, rep.Verdict)
		}
	}
}
