package scenarios_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// pausingObserver holds the story at each of its first steps, as a teacher
// under --step does, and says for how long (Options.Held).
type pausingObserver struct {
	pause  time.Duration
	pauses int // how many steps to hold at

	mu   sync.Mutex
	held time.Duration
}

func (o *pausingObserver) ScenarioStart(scenarios.Scenario, uint64) {}
func (o *pausingObserver) PhaseStart(scenarios.Phase, int)          {}
func (o *pausingObserver) PhaseEnd(scenarios.PhaseReport)           {}
func (o *pausingObserver) ScenarioEnd(scenarios.Report)             {}

func (o *pausingObserver) Event(e scenarios.Event) {
	if e.Kind != scenarios.KindStep || o.pauses == 0 {
		return
	}
	o.pauses--
	start := time.Now()
	time.Sleep(o.pause) // the teacher talking: the thing the clock must leave out
	o.mu.Lock()
	o.held += time.Since(start)
	o.mu.Unlock()
}

func (o *pausingObserver) Held() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.held
}

// A story held by its watcher (--step, --web) tells the run's times, not
// the watcher's: the events' clock and the story's duration leave the
// pauses out, in order, as --timeline shows them.
func TestStoryClockLeavesOutTheWatchersPauses(t *testing.T) {
	// Beside the other tests: most of its time is the two pauses.
	t.Parallel()
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	s, _ := scenarios.Get("lost-response")
	obs := &pausingObserver{pause: time.Second, pauses: 2}
	began := time.Now()
	rep, err := scenarios.ExecuteWith(context.Background(), s, dbs, 1, obs, scenarios.Options{Held: obs.Held})
	wall := time.Since(began)
	if err != nil || !rep.Passed {
		t.Fatalf("lost-response: %v %s", err, rep.Verdict)
	}
	if obs.pauses != 0 {
		t.Fatalf("the story had fewer steps than the pauses to make")
	}
	held := obs.Held()
	// Whatever the machine's speed, the run's own time is the wall's
	// minus the pauses; a clock that counts them runs past it.
	if rep.Duration > wall-held {
		t.Errorf("the story's duration %s counts the pauses: the wall took %s, of which %s were pauses", rep.Duration, wall, held)
	}
	var last time.Duration
	for _, p := range rep.Phases {
		for _, e := range p.Events {
			if e.Elapsed > wall-held {
				t.Errorf("%s: %q at %s counts the pauses: the wall took %s, of which %s were pauses", p.Title, e.Text, e.Elapsed, wall, held)
			}
			if e.Elapsed < last {
				t.Errorf("%s: %q at %s, before the event ahead of it (%s)", p.Title, e.Text, e.Elapsed, last)
			}
			last = e.Elapsed
		}
	}
}
