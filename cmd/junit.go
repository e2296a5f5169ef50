package cmd

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/scenarios"
)

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr,omitempty"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr,omitempty"`
	Time       float64         `xml:"time,attr"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

// junitProperty records how the run was made: its seed, its bug, its
// experiment, so that a failure in CI can be repeated.
type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// junitSkipped marks a test case that neither passed nor failed: a seed
// that broke no rule but did not reach every defence on its own.
type junitSkipped struct {
	Message string `xml:"message,attr"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

// writeJUnit writes the reports as JUnit XML, through a temporary file and a
// rename, so that an interrupted run never leaves half a report behind. The
// file gets the mode a new file would (0666 less the umask).
func writeJUnit(path string, reports []scenarios.Report, elapsed time.Duration, seed uint64, bug *mistakes.Bug) error {
	suite := junitSuite{Name: "bank-sim scenarios", Time: elapsed.Seconds()}
	suite.Properties = append(suite.Properties, junitProperty{"seed", strconv.FormatUint(seed, 10)}, junitProperty{"version", version()})
	if bug != nil {
		suite.Properties = append(suite.Properties, junitProperty{"bug", bug.Name})
	}
	for _, r := range reports {
		for _, c := range r.Changes {
			suite.Properties = append(suite.Properties, junitProperty{"change", c.What})
		}
		break
	}
	for _, r := range reports {
		tc := junitCase{Name: r.Scenario, Classname: "bank-sim.scenario", Time: r.Duration.Seconds(), SystemOut: storyText(r)}
		if !r.Passed {
			tc.Failure = &junitFailure{Message: r.Verdict, Type: "InvariantViolation", Body: storyText(r)}
			suite.Failures++
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, tc)
	}
	return writeJUnitSuite(path, suite)
}

// writeJUnitSuite writes one suite as a JUnit document to path: whole or
// not at all, with the mode a new file gets.
func writeJUnitSuite(path string, suite junitSuite) error {
	doc := junitSuites{Tests: suite.Tests, Failures: suite.Failures, Skipped: suite.Skipped, Time: suite.Time, Suites: []junitSuite{suite}}
	data, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic("--junit", path, append([]byte(xml.Header), append(data, '\n')...))
}

// writeFileAtomic writes data to path through a temporary file in the same
// directory and a rename, with the mode a new file gets (0666 less the
// umask, as os.Create would), instead of CreateTemp's 0600.
func writeFileAtomic(flag, path string, data []byte) error {
	fail := func(err error) error { return fmt.Errorf("%s %s: cannot write it (%s)", flag, path, plainIOError(err)) }
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bank-sim-*.tmp")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Chmod(0o666 &^ umask()); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fail(err)
	}
	return nil
}

// umask is the process's file mode creation mask, read without changing it
// (/proc/self/status on Linux); 022, the usual one, when it cannot be read.
func umask() os.FileMode {
	data, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(m)
				}
			}
		}
	}
	return 0o022
}

// storyText is a scenario's story without colour, for reports: every event
// and check, with short keys and people's names.
func storyText(r scenarios.Report) string {
	var b strings.Builder
	for _, p := range r.Phases {
		h := newHumanizer(p.Labels)
		fmt.Fprintf(&b, "%s\n", p.Title)
		for _, e := range p.Events {
			switch e.Kind {
			case scenarios.KindSend, scenarios.KindArrive, scenarios.KindAnswer:
				continue
			case scenarios.KindServer, scenarios.KindFault, scenarios.KindDatabase:
				fmt.Fprintf(&b, "    %s\n", sideText(e, h.text(e.Text)))
			case scenarios.KindExpect:
				mark := "ok  "
				if e.OK == nil || !*e.OK {
					mark = "FAIL"
				}
				fmt.Fprintf(&b, "  %s %s%s\n", mark, sourceLabel(e.Source), h.text(e.Text))
			default:
				fmt.Fprintf(&b, "  %s\n", h.text(e.Text))
			}
		}
		for _, c := range p.Invariants {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
				if p.Control && p.Passed {
					mark = "BROKE (the point of this run)"
				}
			}
			fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.Name, h.text(c.Detail))
		}
		fmt.Fprintf(&b, "  -> %s\n", h.text(p.Verdict))
	}
	return b.String()
}

// failoverJUnit is a failover drill's JUnit suite (chaos --failover-cmd or
// --expect-failover with --junit): the run, failed when INVALID; the
// team's command, failed when it did not exit 0; and each change of
// primary, failed when acknowledged transfers or completed keys did not
// survive it.
func failoverJUnit(h *chaos.History, res chaos.Result) junitSuite {
	suite := junitSuite{Name: "bank-sim chaos failover drill", Time: h.Duration.Seconds()}
	suite.Properties = append(suite.Properties, junitProperty{"seed", strconv.FormatUint(h.Seed, 10)}, junitProperty{"version", version()})
	add := func(tc junitCase) {
		suite.Tests++
		switch {
		case tc.Failure != nil:
			suite.Failures++
		case tc.Skipped != nil:
			suite.Skipped++
		}
		suite.Cases = append(suite.Cases, tc)
	}
	run := junitCase{Name: fmt.Sprintf("chaos run, seed %d", h.Seed), Classname: "bank-sim.chaos", Time: h.Duration.Seconds(),
		SystemOut: fmt.Sprintf("%s: %d violation(s)", res.Verdict(), len(res.Violations))}
	switch res.Verdict() {
	case chaos.Invalid:
		var b strings.Builder
		for _, v := range res.Violations {
			fmt.Fprintf(&b, "%s: %s\n", v.Kind, v.Detail)
		}
		run.Failure = &junitFailure{Message: fmt.Sprintf("INVALID: %d violation(s)", len(res.Violations)), Type: "InvariantViolation", Body: b.String()}
	case chaos.Inconclusive:
		run.Skipped = &junitSkipped{Message: "INCONCLUSIVE: not reached: " + strings.Join(res.Coverage.Missing(), ", ")}
	}
	add(run)
	if fc := h.FailoverCommand; fc != nil {
		tc := junitCase{Name: "failover command", Classname: "bank-sim.chaos.failover", Time: float64(fc.EndNs-fc.StartNs) / 1e9, SystemOut: fc.Line() + "\n" + fc.Output}
		switch {
		case fc.ExitCode != 0:
			tc.Failure = &junitFailure{Message: fc.Line(), Type: "FailoverCommandFailed", Body: fc.Output}
		case len(res.PrimaryChanges) == 0:
			tc.Failure = &junitFailure{Message: fc.Line() + "; it changed no primary", Type: "NoFailover", Body: fc.Output}
		}
		add(tc)
	}
	for _, pc := range res.PrimaryChanges {
		tc := junitCase{Name: fmt.Sprintf("primary changed %s → %s", pc.From, pc.To), Classname: "bank-sim.chaos.failover",
			Time: float64(max(pc.UnavailableNs(), 0)) / 1e9, SystemOut: pc.Line()}
		if len(pc.Crossing) > 0 {
			var b strings.Builder
			for _, v := range pc.Crossing {
				fmt.Fprintf(&b, "%s: %s\n", v.Kind, v.Detail)
			}
			tc.Failure = &junitFailure{Message: pc.Line(), Type: "LostAcrossFailover", Body: b.String()}
		}
		add(tc)
	}
	return suite
}
