package scenarios_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// Each control of the side-effect scenarios breaks exactly the invariants its
// protection exists for, and no other: a control that broke something else
// would prove a different point.
func TestSideEffectControlsBreakTheRightInvariants(t *testing.T) {
	want := map[string][][]string{
		"sms-side-effect":       {{outbox.InvNoGhost}, {outbox.InvOneSMS}},
		"dual-write":            {{outbox.InvNoEventLost}, {outbox.InvNoGhost}},
		"outbox-crash":          {{outbox.InvOneSMS}},
		"competing-dispatchers": {{outbox.InvSentOnce, outbox.InvOneClaim}},
		"consumer-redelivery":   {{outbox.InvEffectOnce}},
		"external-lock":         {{bank.InvOnce}},
		"mark-shipped":          {{scenarios.InvCourierOnce}},
	}
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	for name, controls := range want {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, ok := scenarios.Get(name)
			if !ok {
				t.Fatalf("no scenario %s", name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := scenarios.Execute(ctx, s, dbs, 11, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]string
			for _, p := range rep.Phases {
				if !p.Control {
					continue
				}
				var broke []string
				for _, c := range p.Invariants {
					if !c.OK {
						broke = append(broke, c.Name)
					}
				}
				got = append(got, broke)
			}
			if !slices.EqualFunc(got, controls, slices.Equal[[]string]) {
				t.Errorf("controls broke %q, want %q", got, controls)
			}
			if !rep.Passed {
				t.Errorf("verdict: %s", rep.Verdict)
			}
		})
	}
}

// Each mistake of the side effects is caught by the protected phase of the
// scenario written for it, alone: the audit's promise, kept per scenario so
// that a scenario that stops catching its mistake fails here by name.
func TestSideEffectBugsAreCaught(t *testing.T) {
	want := map[string]string{
		"sms-in-transaction":             "sms-side-effect",
		"sms-after-commit":               "sms-side-effect",
		"publish-in-transaction":         "dual-write",
		"publish-after-commit":           "dual-write",
		"no-provider-key":                "outbox-crash",
		"dispatcher-without-skip-locked": "competing-dispatchers",
		"mark-done-without-claim-token":  "competing-dispatchers",
		"consumer-without-dedup":         "consumer-redelivery",
		"offset-before-effect":           "consumer-redelivery",
		"lock-release-without-token":     "external-lock",
		"ship-read-then-write":           "mark-shipped",
	}
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	for bugName, scenario := range want {
		t.Run(bugName, func(t *testing.T) {
			t.Parallel()
			if rep := withBug(t, dbs, scenario, bugName); !rep.Caught() {
				t.Errorf("%s with --bug %s passed: %s", scenario, bugName, rep.Verdict)
			}
		})
	}
}

// withBug runs scenario's protected phases with the mistake bugName on, seed 5.
func withBug(t *testing.T, dbs banks.Databases, scenario, bugName string) scenarios.Report {
	t.Helper()
	bug, err := mistakes.Lookup(bugName)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := scenarios.Get(scenario)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := scenarios.ExecuteWith(ctx, s, dbs, 5, nil, scenarios.Options{Bug: &bug, SkipControls: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A mistake that answers a staged request before it reaches where its story
// holds it (keys in memory answer copy 2 at once; without a row lock the
// laptop's transfer never queues for Bola's row) is caught by what it did:
// an expectation with the answers it got, not the stage's bound ("could not
// finish", after 10 s a phase).
func TestStagedStoriesJudgeAnEarlyAnswerInsteadOfWaitingItOut(t *testing.T) {
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	// What the story must say happened, in a protected phase's events.
	said := map[string]string{
		"memory-keys": "copy 2: 409 request_in_progress",
		"no-row-lock": "went on without waiting for the row",
	}
	for bugName, scenario := range map[string]string{"memory-keys": "double-tap", "no-row-lock": "double-spend"} {
		t.Run(bugName, func(t *testing.T) {
			t.Parallel()
			rep := withBug(t, dbs, scenario, bugName)
			if !rep.Caught() {
				t.Fatalf("%s with --bug %s passed: %s", scenario, bugName, rep.Verdict)
			}
			if strings.Contains(rep.Verdict, "could not finish") || strings.Contains(rep.Verdict, "staging") {
				t.Errorf("%s with --bug %s waited out a stage: %s", scenario, bugName, rep.Verdict)
			}
			if !strings.Contains(rep.Verdict, "expected") {
				t.Errorf("%s with --bug %s: verdict %q names no expectation", scenario, bugName, rep.Verdict)
			}
			var events []string
			for _, ph := range rep.Phases {
				for _, ev := range ph.Events {
					events = append(events, ev.Text)
				}
			}
			if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, said[bugName]) }) {
				t.Errorf("%s with --bug %s never says %q; it said:\n%s", scenario, bugName, said[bugName], strings.Join(events, "\n"))
			}
		})
	}
}
