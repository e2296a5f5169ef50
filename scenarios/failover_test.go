package scenarios_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// The failover story, both phases, on real pairs of servers: without
// protection the transfer Ada was told about and its key are gone after
// the failover and her resend moves the money again, breaking the story's
// own invariant and no other; with synchronous replication both survive
// and the resend is replayed. Either way the app's multi-host URL reaches
// the promoted standby, and nothing of either pair is left running. The
// exhaustive run repeats it: the loss must be certain, not likely.
func TestFailoverStory(t *testing.T) {
	// Beside the other tests: most of its time is two pairs of servers
	// starting and failing over, on a cluster of their own.
	t.Parallel()
	s, ok := scenarios.Get("failover")
	if !ok {
		t.Fatal("no failover scenario")
	}
	runs := 1
	if pgtest.IsExhaustive() {
		runs = 5
	}
	dbs := banks.OnServer(pgtest.Server(t), banks.Options{})
	for i := 0; i < runs; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		rep, err := scenarios.Execute(ctx, s, dbs, uint64(42+i), nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Phases) != 2 {
			t.Fatalf("%d phases", len(rep.Phases))
		}
		for _, p := range rep.Phases {
			if p.Error != "" {
				t.Fatalf("%s: %s", p.Title, p.Error)
			}
			for _, e := range p.Expectations {
				if !e.OK {
					t.Errorf("%s: expectation failed: %s", p.Title, e.Text)
				}
			}
			if want := "Ada ₦40,000, Bola ₦15,000, Chidi ₦20,000 | total ₦75,000 | transfers 1"; p.Balances != want {
				t.Errorf("%s: balances\n got %s\nwant %s", p.Title, p.Balances, want)
			}
			if !expectationMet(p, "the app's multi-host URL now reaches the promoted standby") {
				t.Errorf("%s: the app was not served by the promoted standby", p.Title)
			}
			pids := postmasters(p)
			if len(pids) != 2 {
				t.Errorf("%s: the story names postmasters %v, want the primary's and the standby's", p.Title, pids)
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("%s: postmaster %d still runs after the story (%v)", p.Title, pid, err)
				}
			}
		}
		control, protected := rep.Phases[0], rep.Phases[1]

		if got := broken(control); strings.Join(got, "|") != scenarios.InvSurvivesFailover {
			t.Errorf("the control broke %q, want only %q", got, scenarios.InvSurvivesFailover)
		}
		if !expectationMet(control, "after the failover transfer 1 and key") {
			t.Error("without protection, the transfer and key should be gone after the failover")
		}
		if a := attempts(control); len(a) != 2 || a[0] != "attempt 1: 201: transfer 1, ₦10,000 from Ada to Bola" ||
			a[1] != "resend after the failover: 201: transfer 1, ₦10,000 from Ada to Bola" {
			t.Errorf("without protection, want a 201 and then a new 201 (not replayed); got %q", a)
		}

		if got := broken(protected); len(got) > 0 {
			t.Errorf("with protection, invariants broke: %q", got)
		}
		if !expectationMet(protected, "after the failover the bank still has transfer 1 and key") {
			t.Error("with protection, the transfer and key should survive the failover")
		}
		if !stepSaid(protected, "no answer yet: the primary holds the commit until the standby has it") {
			t.Error("with protection, Ada's answer should wait while the standby is not receiving")
		}
		if a := attempts(protected); len(a) != 2 || a[0] != "attempt 1: 201: transfer 1, ₦10,000 from Ada to Bola" ||
			a[1] != "resend after the failover: 201 replayed: transfer 1, ₦10,000 from Ada to Bola" {
			t.Errorf("with protection, want a 201 and then the same 201 replayed; got %q", a)
		}
		if !rep.Passed {
			t.Errorf("verdict: %s", rep.Verdict)
		}
	}
}

func broken(p scenarios.PhaseReport) []string {
	var out []string
	for _, c := range p.Invariants {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

func expectationMet(p scenarios.PhaseReport, prefix string) bool {
	for _, e := range p.Expectations {
		if strings.HasPrefix(e.Text, prefix) {
			return e.OK
		}
	}
	return false
}

func stepSaid(p scenarios.PhaseReport, text string) bool {
	for _, e := range p.Events {
		if e.Kind == scenarios.KindStep && e.Text == text {
			return true
		}
	}
	return false
}

func attempts(p scenarios.PhaseReport) []string {
	var out []string
	for _, e := range p.Events {
		if e.Kind == scenarios.KindAttempt {
			out = append(out, e.Text)
		}
	}
	return out
}

var postmasterRE = regexp.MustCompile(`\(postmaster (\d+)\)`)

// postmasters are the pair's postmasters, as the phase's server lanes name
// them.
func postmasters(p scenarios.PhaseReport) []int {
	var pids []int
	for _, e := range p.Events {
		if e.Kind != scenarios.KindServer {
			continue
		}
		if m := postmasterRE.FindStringSubmatch(e.Text); m != nil {
			pid, _ := strconv.Atoi(m[1])
			pids = append(pids, pid)
		}
	}
	return pids
}
