package cmd

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/scenarios"
)

// The concurrent stories are staged with hooks, not left to timing: with one
// seed they tell the same story, word for word, run after run (the outbox's
// competing dispatchers and mark-shipped's two copies too). (Before,
// double-tap's 409 showed in 2 runs of 6, and the copies' answers came in
// either order.) The runs share one server and its template, as the
// scenarios of one --all do: 2 runs by default (the first is compared with
// the second), 20 when exhaustive.
func TestStagedStoriesTellTheSameStoryEveryRun(t *testing.T) {
	t.Parallel()
	runs := 2
	if pgtest.IsExhaustive() {
		runs = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := postgres.Start(ctx, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var list []scenarios.Scenario
	// Every story with more than one goroutine, or a race it stages: the
	// issue's double-tap, the overdraft race (double-spend), freeze-race and
	// three-servers, and the others that stage one.
	for _, name := range []string{"double-tap", "double-spend", "freeze-race", "three-servers", "crash-takeover",
		"external-lock", "clock-skew", "client-disconnect", "competing-dispatchers", "mark-shipped"} {
		s, ok := scenarios.Get(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		list = append(list, s)
	}
	elapsed := regexp.MustCompile(`\(\d+(\.\d+)? (ms|s)\)`)
	p := newPalette(false)
	var first string
	for run := 1; run <= runs; run++ {
		var out bytes.Buffer
		dbs := banks.OnServer(srv, banks.Options{Async: true})
		reports, _, err := executeAll(ctx, list, dbs, 11, scenarios.Options{}, len(list), &out,
			func(w io.Writer) scenarios.Observer { return &storyObserver{out: w, p: p} })
		dbs.Wait()
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for _, r := range reports {
			if !r.Passed {
				t.Fatalf("run %d: %s failed: %s\n%s", run, r.Scenario, r.Verdict, out.String())
			}
		}
		story := elapsed.ReplaceAllString(out.String(), "(<dur>)")
		for _, want := range []string{"copy 2: 409 request_in_progress", "copy 2: 201 replayed", "laptop: 422 insufficient_funds",
			"C waits for B's row locks", "C skips the rows B has locked", "the other: already shipped (ok)"} {
			if !strings.Contains(story, want) {
				t.Fatalf("run %d: the story lacks %q:\n%s", run, want, story)
			}
		}
		if run == 1 {
			first = story
			continue
		}
		if story != first {
			t.Fatalf("run %d told another story than run 1:\n--- run 1\n%s\n--- run %d\n%s", run, first, run, story)
		}
	}
}
