package scenarios_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// lessonBalances is the balances line the lesson prints at the end of each
// protected story (and, for controls, of the broken one).
var lessonBalances = map[string][]string{
	"partial-failure": {
		"Ada ₦40,000, Bola ₦5,000, Chidi ₦20,000 | total ₦65,000 | transfers 0",
		"Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0",
	},
	"freeze-race": {
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"rules": {"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1"},
	"lost-response": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"key-misuse": {"", "Ada ₦41,000, Bola ₦14,000, Chidi ₦20,000 | total ₦75,000 | transfers 2"},
	"double-tap": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"crash-takeover": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"key-cleanup": {"", "Ada ₦47,000, Bola ₦8,000, Chidi ₦20,000 | total ₦75,000 | transfers 2"},
	"fail-before-commit": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"double-spend": {
		"Ada ₦60,000, Bola ₦5,000, Chidi ₦20,000 | total ₦85,000 | transfers 3",
		"Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
	},
	"http-tunnel": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"http-misuse": {"Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0"},
	"three-servers": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"client-disconnect": {
		"Ada ₦42,000, Bola ₦13,000, Chidi ₦20,000 | total ₦75,000 | transfers 3",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 4",
	},
	"clock-skew": {
		"Ada ₦36,000, Bola ₦19,000, Chidi ₦20,000 | total ₦75,000 | transfers 3",
		"Ada ₦38,000, Bola ₦17,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
	},
	"retry-policy": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"sms-side-effect": {
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"dual-write": {
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"outbox-crash": {
		"Ada ₦35,000, Bola ₦20,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦35,000, Bola ₦20,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
	},
	"competing-dispatchers": {
		"Ada ₦44,000, Bola ₦11,000, Chidi ₦20,000 | total ₦75,000 | transfers 6",
		"Ada ₦44,000, Bola ₦11,000, Chidi ₦20,000 | total ₦75,000 | transfers 6",
	},
	"consumer-redelivery": {
		"Ada ₦44,000, Bola ₦11,000, Chidi ₦20,000 | total ₦75,000 | transfers 3",
		"Ada ₦44,000, Bola ₦11,000, Chidi ₦20,000 | total ₦75,000 | transfers 3",
	},
	"external-lock": {
		"Ada ₦30,000, Bola ₦25,000, Chidi ₦20,000 | total ₦75,000 | transfers 2",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
	"mark-shipped": {
		"Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0",
		"Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000 | transfers 0",
	},
	// Run by TestFailoverStory alone (it starts two pairs of servers), which
	// checks all this test does and more.
	"failover": {
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
		"Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1",
	},
}

func TestEveryScenarioPassesWithTheLessonsNumbers(t *testing.T) {
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	if len(scenarios.List()) != len(lessonBalances) {
		t.Fatalf("scenarios %v, but the test knows %d", scenarios.Names(), len(lessonBalances))
	}
	for _, s := range scenarios.List() {
		if s.Name == "failover" {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := scenarios.Execute(ctx, s, dbs, 42, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range rep.Phases {
				broken := 0
				for _, c := range p.Invariants {
					if !c.OK {
						broken++
						t.Logf("%s: %s: %s", p.Title, c.Name, c.Detail)
					}
				}
				for _, e := range p.Expectations {
					if !e.OK {
						t.Errorf("%s: expectation failed: %s", p.Title, e.Text)
					}
				}
				if p.Control && broken == 0 {
					t.Errorf("%s: the control broke no invariant", p.Title)
				}
				if !p.Control && broken > 0 {
					t.Errorf("%s: %d invariants broke", p.Title, broken)
				}
				if want := lessonBalances[s.Name][i]; want != "" && p.Balances != want {
					t.Errorf("%s: balances\n got %s\nwant %s", p.Title, p.Balances, want)
				}
				if p.Error != "" {
					t.Errorf("%s: %s", p.Title, p.Error)
				}
				// Its pictures (--timeline, the HTML's diagrams) have a lane
				// per party: a story told as a column of notes shows no one.
				if lanes := eventLanes(p); len(lanes) < 2 {
					t.Errorf("%s: the diagram's lanes are %q; want at least 2 (the app, the server, the database…)", p.Title, lanes)
				}
			}
			if !rep.Passed {
				t.Errorf("verdict: %s", rep.Verdict)
			}
		})
	}
}

// eventLanes are the lanes a phase's events name, as its diagrams draw
// them.
func eventLanes(p scenarios.PhaseReport) []string {
	var lanes []string
	for _, e := range p.Events {
		for _, l := range []string{e.From, e.To, e.Lane} {
			if l != "" && !slices.Contains(lanes, l) {
				lanes = append(lanes, l)
			}
		}
		if e.Kind == scenarios.KindServer && e.Lane == "" && !slices.Contains(lanes, "server") {
			lanes = append(lanes, "server")
		}
	}
	return lanes
}

// Each control must break the invariant that its protection exists for.
func TestControlsBreakTheRightInvariant(t *testing.T) {
	want := map[string]string{
		"partial-failure":    bank.InvTotal,
		"lost-response":      bank.InvOnce,
		"key-misuse":         bank.InvTruth,
		"double-tap":         bank.InvOnce,
		"crash-takeover":     bank.InvOnce,
		"key-cleanup":        bank.InvOnce,
		"fail-before-commit": bank.InvOnce,
		"double-spend":       bank.InvTotal,
		"http-tunnel":        bank.InvOnce,
		"three-servers":      bank.InvOnce,
		"retry-policy":       bank.InvOnce,
	}
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	for name, inv := range want {
		s, ok := scenarios.Get(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		rep, err := scenarios.Execute(context.Background(), s, dbs, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		var broke []string
		for _, c := range rep.Phases[0].Invariants {
			if !c.OK {
				broke = append(broke, c.Name)
			}
		}
		if !strings.Contains(strings.Join(broke, "|"), inv) {
			t.Errorf("%s: control broke %v, want %q among them", name, broke, inv)
		}
	}
}

// A scenario run with --bug no-balance-floor meets the mistake's schema in
// its protected phases, as a chaos run does (mistakes.Bug.ApplySchema):
// without it, the audit's scenario column would judge the mistake on a
// bank that still refuses to overdraw. Its controls, which keep their own
// mistakes, meet the schema every run meets; so does the next run, on the
// bank the recycler lends again.
func TestProtectedPhasesMeetTheMistakesSchema(t *testing.T) {
	ctx := pgtest.Bounded(t, "two runs of a two-phase story")
	bug, err := mistakes.Lookup("no-balance-floor")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	phase := func(title string, control bool) scenarios.Phase {
		return scenarios.Phase{Title: title, Control: control, Run: func(ctx context.Context, r *scenarios.Run) error {
			floor, err := pgtest.HasBalanceFloor(ctx, r.DB)
			seen = append(seen, fmt.Sprintf("%s floor=%v", title, floor))
			return err
		}}
	}
	// The control's phase must break an invariant to pass; this one only
	// looks, so the report is not judged here, only what each phase saw.
	story := scenarios.Scenario{Name: "floor-probe", Summary: "each phase reads the accounts table's CHECK",
		Phases: []scenarios.Phase{phase("control", true), phase("protected", false)}}
	shared, closeBanks := banks.Recycled(banks.OnServer(pgtest.Server(t), banks.Options{}))
	defer closeBanks()
	for _, b := range []*mistakes.Bug{&bug, nil} {
		if _, err := scenarios.ExecuteWith(ctx, story, shared, 7, nil, scenarios.Options{Bug: b}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"control floor=true", "protected floor=false", "control floor=true", "protected floor=true"}
	if !slices.Equal(seen, want) {
		t.Errorf("with no-balance-floor, then without: the phases saw %v, want %v", seen, want)
	}
}
