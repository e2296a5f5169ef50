package cmd

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/banksim/bank-sim/scenarios"
)

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Time     float64      `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     float64     `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

// writeJUnit writes the reports as JUnit XML, through a temporary file and a
// rename, so that an interrupted run never leaves half a report behind.
func writeJUnit(path string, reports []scenarios.Report, elapsed time.Duration) error {
	suite := junitSuite{Name: "bank-sim scenarios", Time: elapsed.Seconds()}
	for _, r := range reports {
		tc := junitCase{Name: r.Scenario, Classname: "bank-sim.scenario", Time: r.Duration.Seconds(), SystemOut: storyText(r)}
		if !r.Passed {
			tc.Failure = &junitFailure{Message: r.Verdict, Type: "InvariantViolation", Body: storyText(r)}
			suite.Failures++
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, tc)
	}
	doc := junitSuites{Tests: suite.Tests, Failures: suite.Failures, Time: suite.Time, Suites: []junitSuite{suite}}
	data, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".junit-*.xml")
	if err != nil {
		return fmt.Errorf("write --junit %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append([]byte(xml.Header), data...)); err != nil {
		tmp.Close()
		return fmt.Errorf("write --junit %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write --junit %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write --junit %s: %w", path, err)
	}
	return nil
}

// storyText is a scenario's story without colour, for reports.
func storyText(r scenarios.Report) string {
	var b strings.Builder
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "%s\n", p.Title)
		for _, e := range p.Events {
			fmt.Fprintf(&b, "  %s\n", e.Text)
		}
		for _, c := range p.Invariants {
			mark := "ok  "
			if !c.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.Name, c.Detail)
		}
		fmt.Fprintf(&b, "  -> %s\n", p.Verdict)
	}
	return b.String()
}
