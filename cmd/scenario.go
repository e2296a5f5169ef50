package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

type scenarioOptions struct {
	all      bool
	seed     string
	asJSON   bool
	junit    string
	step     bool
	timeline bool
	parallel int
	bug      string
}

func newScenarioCmd(app *App) *cobra.Command {
	var o scenarioOptions
	c := &cobra.Command{
		Use:   "scenario NAME... | --all",
		Short: "Run scenarios on a fresh bank and check every invariant",
		Long: `Run one or more scenarios. Each runs first without protection — the fault
must break an invariant, which proves it is real — and then with protection,
where every invariant must hold. Each phase starts from the lesson's bank —
Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 (frozen) — in a database cloned from
a template for its scenario.

Exit code 0 when every expectation and invariant held, 1 when something
broke, 2 for a usage error, 3 when PostgreSQL could not be started or reached.`,
		Example: `  bank-sim scenario lost-response
  bank-sim scenario double-tap crash-takeover --seed 42
  bank-sim scenario --all --json > report.json
  bank-sim scenario --all --junit junit.xml`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return scenarios.Names(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error { return runScenarios(c, app, o, args) },
	}
	f := c.Flags()
	f.BoolVar(&o.all, "all", false, "run every scenario")
	f.StringVar(&o.seed, "seed", "", "seed for every random choice (printed on each run; default: a new one)")
	f.BoolVar(&o.asJSON, "json", false, "print one JSON report per scenario instead of the story")
	f.StringVar(&o.junit, "junit", "", "also write a JUnit XML report to `FILE`, one test case per scenario")
	f.BoolVar(&o.step, "step", false, "pause after every step until Enter is pressed (for teaching)")
	f.IntVar(&o.parallel, "parallel", 4, "run up to `N` scenarios at once (their stories still print in order); --step runs one at a time")
	f.BoolVar(&o.timeline, "timeline", false, "prefix every line with its time since the start (and the simulated clock)")
	f.StringVar(&o.bug, "bug", "", "switch one of the lesson's mistakes on in the protected phases (see 'bank-sim list --bugs'); they should then fail")
	return c
}

func pickScenarios(all bool, args []string) ([]scenarios.Scenario, error) {
	if all && len(args) > 0 {
		return nil, usageError("give scenario names or --all, not both")
	}
	if all {
		return scenarios.List(), nil
	}
	if len(args) == 0 {
		return nil, usageError("name a scenario, or use --all; valid names: %s", strings.Join(scenarios.Names(), ", "))
	}
	var out []scenarios.Scenario
	seen := map[string]bool{}
	for _, name := range args {
		s, ok := scenarios.Get(name)
		if !ok {
			return nil, usageError("unknown scenario %q; valid names: %s", name, strings.Join(scenarios.Names(), ", "))
		}
		if !seen[name] {
			seen[name] = true
			out = append(out, s)
		}
	}
	return out, nil
}

func parseSeed(app *App, s string) (uint64, error) {
	if s == "" {
		return uint64(app.Env.Now().UnixNano()), nil
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError("--seed %q is not a whole number from 0 to %d", s, uint64(1<<64-1))
	}
	return seed, nil
}

func checkWritable(path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usageError("--junit %s: the directory %s does not exist", path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usageError("--junit %s is a directory; give a file name", path)
	}
	return nil
}

func runScenarios(c *cobra.Command, app *App, o scenarioOptions, args []string) error {
	list, err := pickScenarios(o.all, args)
	if err != nil {
		return err
	}
	seed, err := parseSeed(app, o.seed)
	if err != nil {
		return err
	}
	if o.junit != "" {
		if err := checkWritable(o.junit); err != nil {
			return err
		}
	}
	if o.step && o.asJSON {
		return usageError("--step pauses the story; it cannot be combined with --json")
	}
	bug, err := parseBug(o.bug)
	if err != nil {
		return err
	}

	ctx := c.Context()
	out := app.Env.Stdout
	parallel := o.parallel
	if o.step || parallel < 1 {
		parallel = 1
	}
	// Each scenario gets its own observer; with --json there is none.
	var newObserver func(w io.Writer) scenarios.Observer
	var text *textObserver
	if !o.asJSON {
		text = &textObserver{out: out, p: app.palette(), timeline: o.timeline}
		if o.step {
			text.pause = bufio.NewReader(app.Env.Stdin)
		}
		newObserver = func(w io.Writer) scenarios.Observer {
			t := *text
			t.out = w
			return &t
		}
		fmt.Fprintf(out, "bank-sim %s · seed %d (repeat this run with --seed %d)\n", version(), seed, seed)
		if bug != nil {
			fmt.Fprintf(out, "bug %s is on in every protected phase: %s\n", bug.Name, bug.Mistake)
		}
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	if text != nil {
		fmt.Fprintf(out, "%s\n", app.palette().dim.Sprint(srv.Describe()))
	}

	start := time.Now()
	dbs, waitDrops := scenarios.AsyncBanks(srv)
	reports, err := executeAll(ctx, list, dbs, seed, scenarios.Options{Bug: bug}, parallel, out, newObserver)
	waitDrops()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	elapsed := time.Since(start)

	if o.junit != "" {
		if err := writeJUnit(o.junit, reports, elapsed); err != nil {
			return &ExitError{Code: ExitFailed, Err: err}
		}
	}
	passed, failed := 0, 0
	for _, r := range reports {
		if r.Passed {
			passed++
		} else {
			failed++
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(jsonRun{Seed: seed, Database: srv.Describe(), Passed: passed, Failed: failed,
			Duration: elapsed, Reports: reports}); err != nil {
			return err
		}
	} else {
		text.summary(reports, passed, failed, elapsed)
	}
	if failed > 0 {
		return errFailed
	}
	return nil
}

type jsonRun struct {
	Seed     uint64             `json:"seed"`
	Database string             `json:"database"`
	Passed   int                `json:"passed"`
	Failed   int                `json:"failed"`
	Duration time.Duration      `json:"durationNs"`
	Reports  []scenarios.Report `json:"reports"`
}

// executeAll runs the scenarios, up to parallel at once, each on its own
// databases. Stories print in the order of the list: the first unfinished
// scenario writes straight to out, as it happens; the others write to
// buffers that are flushed when their turn comes.
func executeAll(ctx context.Context, list []scenarios.Scenario, dbs scenarios.Databases, seed uint64, opts scenarios.Options,
	parallel int, out io.Writer, newObserver func(io.Writer) scenarios.Observer) ([]scenarios.Report, error) {
	ordered := newOrderedOutput(out, len(list))
	reports := make([]scenarios.Report, len(list))
	errs := make([]error, len(list))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, s := range list {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var obs scenarios.Observer
			if newObserver != nil {
				obs = newObserver(ordered.writer(i))
			}
			reports[i], errs[i] = scenarios.ExecuteWith(ctx, s, dbs, seed, obs, opts)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("scenario %s: %w", s.Name, errs[i])
			}
			ordered.done(i)
		}()
	}
	wg.Wait()
	return reports, errors.Join(errs...)
}

// orderedOutput lets n writers share out while keeping their output in
// writer order, streaming the head one live.
type orderedOutput struct {
	mu       sync.Mutex
	out      io.Writer
	head     int
	buffers  []bytes.Buffer
	finished []bool
}

func newOrderedOutput(out io.Writer, n int) *orderedOutput {
	return &orderedOutput{out: out, buffers: make([]bytes.Buffer, n), finished: make([]bool, n)}
}

type orderedWriter struct {
	o *orderedOutput
	i int
}

func (o *orderedOutput) writer(i int) io.Writer { return orderedWriter{o, i} }

func (w orderedWriter) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.i == w.o.head {
		return w.o.out.Write(p)
	}
	return w.o.buffers[w.i].Write(p)
}

func (o *orderedOutput) done(i int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[i] = true
	for o.head < len(o.finished) && o.finished[o.head] {
		o.head++
		if o.head < len(o.buffers) {
			_, _ = o.buffers[o.head].WriteTo(o.out)
		}
	}
}
