package cmd

import (
	"bufio"
	"fmt"
	"io"
	"time"

	"github.com/banksim/bank-sim/scenarios"
)

// textObserver prints a scenario's story as it happens.
type textObserver struct {
	out      io.Writer
	p        *palette
	timeline bool
	pause    *bufio.Reader // set with --step
	phases   int
}

func (t *textObserver) ScenarioStart(s scenarios.Scenario, seed uint64) {
	t.phases = len(s.Phases)
	fmt.Fprintf(t.out, "\n%s %s\n", t.p.head.Sprint("━━ "+s.Name), t.p.dim.Sprint("— "+s.Summary))
}

func (t *textObserver) PhaseStart(p scenarios.Phase, i int) {
	mark := t.p.ok.Sprint("▸")
	if p.Control {
		mark = t.p.warn.Sprint("▸")
	}
	fmt.Fprintf(t.out, "\n%s %s %s\n", mark, t.p.dim.Sprintf("%d/%d", i+1, t.phases), t.p.bold.Sprint(p.Title))
}

func (t *textObserver) Event(e scenarios.Event) {
	prefix := "   "
	if t.timeline {
		clock := ""
		if e.Clock != "" {
			clock = " clock " + e.Clock
		}
		prefix = t.p.dim.Sprintf("%8s%s ", e.Elapsed.Round(time.Millisecond), clock) + " "
	}
	switch e.Kind {
	case "server":
		fmt.Fprintf(t.out, "%s  %s\n", prefix, t.p.dim.Sprint("server side: "+e.Text))
	case "expect":
		if e.OK != nil && *e.OK {
			fmt.Fprintf(t.out, "%s%s %s\n", prefix, t.p.ok.Sprint("✓"), t.p.dim.Sprint("as the lesson says: "+e.Text))
		} else {
			fmt.Fprintf(t.out, "%s%s %s\n", prefix, t.p.bad.Sprint("✗"), "expected "+e.Text+", but it did not happen")
		}
	case "balances":
		fmt.Fprintf(t.out, "%s%s\n", prefix, t.p.bold.Sprint(e.Text))
	default:
		fmt.Fprintf(t.out, "%s%s\n", prefix, e.Text)
	}
	if t.pause != nil && (e.Kind == "step" || e.Kind == "attempt") {
		fmt.Fprint(t.out, t.p.dim.Sprint("      (Enter to continue)"))
		_, _ = t.pause.ReadString('\n')
	}
}

func (t *textObserver) PhaseEnd(r scenarios.PhaseReport) {
	for _, c := range r.Invariants {
		switch {
		case c.OK:
			fmt.Fprintf(t.out, "   %s %s: %s\n", t.p.ok.Sprint("✓"), c.Name, t.p.dim.Sprint(c.Detail))
		case r.Control:
			fmt.Fprintf(t.out, "   %s %s: %s\n", t.p.warn.Sprint("✗"), c.Name, c.Detail)
		default:
			fmt.Fprintf(t.out, "   %s %s: %s\n", t.p.bad.Sprint("✗"), t.p.bad.Sprint(c.Name), c.Detail)
		}
	}
	if r.Error != "" {
		fmt.Fprintf(t.out, "   %s %s\n", t.p.bad.Sprint("error:"), r.Error)
	}
	verdict := t.p.ok.Sprint("→ " + r.Verdict)
	if !r.Passed {
		verdict = t.p.bad.Sprint("→ FAILED: " + r.Verdict)
	}
	fmt.Fprintf(t.out, "   %s\n", verdict)
}

func (t *textObserver) ScenarioEnd(r scenarios.Report) {
	status := t.p.ok.Sprint("PASS")
	if !r.Passed {
		status = t.p.bad.Sprint("FAIL")
	}
	fmt.Fprintf(t.out, "%s %s %s\n", status, r.Scenario, t.p.dim.Sprintf("(%s) — %s", r.Duration.Round(time.Millisecond), r.Verdict))
}

func (t *textObserver) summary(reports []scenarios.Report, passed, failed int, elapsed time.Duration) {
	fmt.Fprintln(t.out)
	for _, r := range reports {
		if !r.Passed {
			fmt.Fprintf(t.out, "%s %s: %s\n", t.p.bad.Sprint("FAIL"), r.Scenario, r.Verdict)
		}
	}
	line := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if failed > 0 {
		line = t.p.bad.Sprint(line)
	} else {
		line = t.p.ok.Sprint(line)
	}
	fmt.Fprintf(t.out, "%s %s\n", line, t.p.dim.Sprintf("in %s", elapsed.Round(time.Millisecond)))
}
