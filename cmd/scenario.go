package cmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

// The output formats of scenario.
const (
	formatStory    = "story"
	formatVerbose  = "verbose"
	formatTimeline = "timeline"
	formatMermaid  = "mermaid"
	formatJSON     = "json"
)

var formats = []string{formatStory, formatVerbose, formatTimeline, formatMermaid, formatJSON}

type scenarioOptions struct {
	all      bool
	seed     string
	format   string
	asJSON   bool
	verbose  bool
	timeline bool
	junit    string
	step     bool
	pace     time.Duration
	parallel int
	bug      string
	faults   []string
	amount   string
	recipe   string
	html     string
	web      bool
}

func newScenarioCmd(app *App) *cobra.Command {
	var o scenarioOptions
	c := &cobra.Command{
		Use:   "scenario NAME... | --all | --recipe FILE",
		Short: "Run scenarios on a fresh bank and check every invariant",
		Long: `Run one or more scenarios. Each runs first without protection — the fault
must break an invariant, which proves it is real — and then with protection,
where every invariant must hold. Each phase starts from the lesson's bank —
Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 (frozen) — in a database cloned from
a template for its scenario.

The story (the default) prints what the lesson's scripts print: per phase the
requests and the answers the clients got, the balances once, and the
verdict — the invariant that broke without protection, or "all invariants
hold". Every check still runs; --verbose prints each one, and the server's
side. --timeline draws each phase as a sequence diagram (client, network,
servers, database); --format mermaid writes the same for slides and docs;
--json is one JSON document for tools.

Live experiments: --fault NAME[@ATTEMPTS] adds a fault (or replaces the
story's own fault of that name) for one run, --amount NAIRA changes the
story's amount. The run says it was changed; the story's own checks are then
shown but do not decide, and the invariants alone judge.

--step holds the story at every step and at each phase's verdict until a key
is pressed (Enter: next, q: quit); --pace 500ms slows every line down.
--step --web also shows the story on a page served on 127.0.0.1 (for a
projector): each phase's diagram grows as the story goes, and Next on the
page (or space, →) advances it as Enter does.

--html FILE also writes the run as one self-contained HTML page: per phase
its sequence diagram, the balances before and after, every invariant's
verdict and the story's own checks; with several stories, a summary table
first. It needs no network to open, and prints.

Exit code 0 when every expectation and invariant held, 1 when something
broke, 2 for a usage error, 3 when PostgreSQL could not be started or
reached, 130 when interrupted (Ctrl-C, or q under --step).`,
		Example: `  bank-sim scenario lost-response
  bank-sim scenario lost-response --verbose        every check, and the server's side
  bank-sim scenario crash-takeover --timeline      a sequence diagram of each phase
  bank-sim scenario double-tap --format mermaid > double-tap.md
  bank-sim scenario lost-response --fault lose-response@1,2 --amount 5000
  bank-sim scenario crash-takeover --step          for teaching: Enter for the next step, q to quit
  bank-sim scenario crash-takeover --step --web    the same on a page for a projector (its address is printed)
  bank-sim scenario lost-response --html lost-response.html
  bank-sim scenario --all --html stories.html
  bank-sim scenario double-tap crash-takeover --seed 42
  bank-sim scenario --all --json > report.json
  bank-sim scenario --all --junit junit.xml
  bank-sim scenario --recipe recipe.json   (a chaos run shrunk by 'bank-sim chaos --shrink --save-recipe')`,
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return scenarios.Names(), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error { return runScenarios(c, app, o, args) },
	}
	f := c.Flags()
	f.BoolVar(&o.all, "all", false, "run every scenario, in the lesson's order")
	f.StringVar(&o.seed, "seed", "", "seed for every random choice (printed on each run; default: a new one)")
	f.StringVar(&o.format, "format", "", "output: story (default), verbose, timeline, mermaid or json")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "every check and the server's side (--format verbose)")
	f.BoolVar(&o.timeline, "timeline", false, "each phase as a sequence diagram in the terminal (--format timeline)")
	f.BoolVar(&o.asJSON, "json", false, "one JSON document with every report (--format json)")
	f.StringVar(&o.junit, "junit", "", "also write a JUnit XML report to `FILE`, one test case per scenario")
	f.BoolVar(&o.step, "step", false, "hold at every step and verdict until a key is pressed (Enter: next, q: quit); needs a terminal")
	f.DurationVar(&o.pace, "pace", 0, "wait this long after every line, e.g. 500ms (slow motion for a demo)")
	f.IntVar(&o.parallel, "parallel", 4, "run up to `N` scenarios at once (their stories still print in order); --step runs one at a time")
	f.StringVar(&o.bug, "bug", "", "switch one of the lesson's mistakes on in the protected phases (see 'bank-sim list --bugs'); they should then fail")
	f.StringArrayVar(&o.faults, "fault", nil, "live experiment: add a fault `NAME[@N,…]` on those attempts (all when none), or replace the story's own fault of that name; repeatable")
	f.StringVar(&o.amount, "amount", "", "live experiment: the story's amount in naira instead of its own (e.g. 5000)")
	_ = c.RegisterFlagCompletionFunc("bug", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var names []string
		for _, b := range mistakes.All() {
			names = append(names, b.Name+"\t"+b.Mistake)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	_ = c.RegisterFlagCompletionFunc("format", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return formats, cobra.ShellCompDirectiveNoFileComp
	})
	_ = c.RegisterFlagCompletionFunc("fault", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return faultNames(), cobra.ShellCompDirectiveNoFileComp
	})
	addHTMLFlag(f, &o.html)
	f.BoolVar(&o.web, "web", false, "with --step: also show the story in a browser, on a page served on 127.0.0.1 (for a projector); Enter here or Next on the page advances")
	f.StringVar(&o.recipe, "recipe", "", "replay the chaos recipe in `FILE` as a story: with its mistake it must break its rule again; with the correct handler every rule must hold")
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
			return nil, usageError("%v", unknownName("scenario", name, scenarios.Names(), "bank-sim list"))
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
		// Below 2^53, so that a seed read back from JSON by JavaScript or
		// jq is the same seed.
		return uint64(app.Env.Now().UnixNano()) & maxSafeSeed, nil
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError("--seed %q is not a whole number from 0 to %d", s, uint64(1<<64-1))
	}
	return seed, nil
}

// seedFlag reads a command's --seed: a new seed when the flag is absent, and
// a usage error when it is given empty (a script's unset variable must not
// silently become a random run).
func seedFlag(app *App, c *cobra.Command, s string) (uint64, error) {
	if c.Flags().Changed("seed") && strings.TrimSpace(s) == "" {
		return 0, usageError("--seed is empty; give a whole number, or leave the flag out for a new seed")
	}
	return parseSeed(app, strings.TrimSpace(s))
}

// checkOutputFile makes sure path can be written before anything runs, so
// that a long run does not end in "cannot write" with its verdict lost: the
// directory must exist and accept a new file, and path must not be a
// directory or a file that cannot be replaced.
func checkOutputFile(flag, path string) error {
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return usageError("%s %s: the directory %s does not exist", flag, path, dir)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return usageError("%s %s is a directory; give a file name", flag, path)
	}
	probe, err := os.CreateTemp(dir, ".bank-sim-check-*")
	if err != nil {
		return usageError("%s %s: cannot write in %s (%s)", flag, path, dir, plainIOError(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// plainIOError is an OS error without the Go operation and path around it.
func plainIOError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (o *scenarioOptions) resolveFormat() error {
	chosen := map[string]bool{}
	if o.format != "" {
		if !slices.Contains(formats, o.format) {
			return usageError("--format %q: give one of %s", o.format, strings.Join(formats, ", "))
		}
		chosen[o.format] = true
	}
	if o.verbose {
		chosen[formatVerbose] = true
	}
	if o.timeline {
		chosen[formatTimeline] = true
	}
	if o.asJSON {
		chosen[formatJSON] = true
	}
	if len(chosen) > 1 {
		var names []string
		for _, f := range formats {
			if chosen[f] {
				names = append(names, f)
			}
		}
		return usageError("%s are different outputs; pick one (--format %s)", strings.Join(names, " and "), strings.Join(formats, "|"))
	}
	o.format = formatStory
	for f := range chosen {
		o.format = f
	}
	return nil
}

// scenarioRun is what runScenarios checked and worked out before starting
// anything.
type scenarioRun struct {
	list   []scenarios.Scenario
	recipe string // --recipe's file: the run is the recipe's, with its own seed
	seed   uint64
	bug    *mistakes.Bug
	opts   scenarios.Options
	format string
}

func checkScenarioFlags(c *cobra.Command, app *App, o *scenarioOptions, args []string) (scenarioRun, error) {
	var run scenarioRun
	list, err := pickScenarios(o.all, args)
	if o.recipe != "" {
		list, err = recipeScenario(o.recipe, o.bug, o.all, args)
		if err == nil && c.Flags().Changed("seed") {
			err = usageError("--seed with --recipe: a recipe replays with the seed it was shrunk from, written in it; leave --seed out")
		}
	}
	if err != nil {
		return run, err
	}
	seed, err := seedFlag(app, c, o.seed)
	if err != nil {
		return run, err
	}
	if err := o.resolveFormat(); err != nil {
		return run, err
	}
	if o.parallel < 1 || o.parallel > 64 {
		return run, usageError("--parallel %d: give 1 to 64 scenarios at once", o.parallel)
	}
	if o.pace < 0 || o.pace > time.Minute {
		return run, usageError("--pace %s: give a wait from 0 to 1m, e.g. 500ms", o.pace)
	}
	machine := o.format == formatJSON || o.format == formatMermaid
	switch {
	case o.step && machine:
		return run, usageError("--step pauses the story for people; it cannot be combined with --format %s", o.format)
	case o.pace > 0 && machine:
		return run, usageError("--pace slows the story for people; it cannot be combined with --format %s", o.format)
	case o.web && !o.step:
		return run, usageError("%v", errNoWeb)
	case o.step && !o.web && !app.Env.StdinTerminal:
		return run, usageError("--step reads the instructor's keys from a terminal, but stdin is not one; run it in a terminal, or use --pace 1s for a slow run that needs no keys")
	}
	if o.junit != "" {
		if err := checkOutputFile("--junit", o.junit); err != nil {
			return run, err
		}
	}
	if c.Flags().Changed("html") {
		if strings.TrimSpace(o.html) == "" {
			return run, usageError("--html is empty; give a file name, e.g. --html report.html")
		}
		if err := checkWritableFlag("--html", o.html); err != nil {
			return run, err
		}
	}
	bug, err := parseBug(o.bug)
	if err != nil {
		return run, err
	}
	opts := scenarios.Options{Bug: bug}
	for _, f := range o.faults {
		spec, err := scenarios.ParseFault(f)
		if err != nil {
			return run, usageError("--fault: %v", err)
		}
		opts.Faults = append(opts.Faults, spec)
	}
	if o.amount != "" {
		kobo, err := parseNaira(o.amount)
		if err != nil {
			return run, usageError("%v", err)
		}
		var fixed, changeable []string
		for _, s := range list {
			if s.Amount == 0 {
				fixed = append(fixed, s.Name)
			}
		}
		for _, s := range scenarios.List() {
			if s.Amount > 0 {
				changeable = append(changeable, s.Name)
			}
		}
		if len(fixed) > 0 {
			return run, usageError("--amount: %s %s no single amount to change; it works with %s",
				strings.Join(fixed, ", "), map[bool]string{true: "has", false: "have"}[len(fixed) == 1], strings.Join(changeable, ", "))
		}
		opts.Amount = kobo
	}
	return scenarioRun{list: list, recipe: o.recipe, seed: seed, bug: bug, opts: opts, format: o.format}, nil
}

func faultNames() []string {
	return slices.Concat(faultsNames(), connFaultNames())
}

func runScenarios(c *cobra.Command, app *App, o scenarioOptions, args []string) error {
	run, err := checkScenarioFlags(c, app, &o, args)
	if err != nil {
		return err
	}
	ctx := c.Context()
	out, p := app.Env.Stdout, app.palette()
	human := run.format != formatJSON && run.format != formatMermaid
	parallel := o.parallel
	if o.step || o.pace > 0 {
		parallel = 1
	}
	changed := changeList(run.opts)

	// q under --step ends the run as Ctrl-C does.
	runCtx, quit := context.WithCancel(ctx)
	defer quit()
	var pace *pacer
	if o.step || o.pace > 0 {
		pace = &pacer{ctx: runCtx, quit: quit, pace: o.pace, prompt: app.Env.Stderr, erase: app.Env.StderrTerminal, p: p}
		if o.step {
			lineMode := true
			if f, ok := app.Env.Stdin.(*os.File); ok {
				restore, single := singleKeys(f)
				defer restore()
				lineMode = !single
			}
			pace.keys = readKeys(runCtx, app.Env.Stdin, lineMode)
		}
	}
	if pace != nil {
		run.opts.Held = pace.held
	}
	var class *classroom
	if o.web {
		class, err = startClassroom()
		if err != nil {
			return &ExitError{Code: ExitFailed, Err: err}
		}
		// Stopped however the run ends: finished, q, Ctrl-C, or PostgreSQL
		// failing to start.
		defer class.close()
		class.feed(runCtx, pace.keys)
		pace.keys, pace.waiting = class.keys, class.waiting
		fmt.Fprintf(app.Env.Stderr, "Classroom page: %s (open it on the projector; Next there or Enter here advances, q here quits)\n", class.url)
	}

	var newObserver func(w io.Writer) scenarios.Observer
	switch run.format {
	case formatJSON:
	case formatMermaid:
		fmt.Fprintf(out, "# bank-sim scenarios\n\nbank-sim %s, seed %d (repeat with `--seed %d`)%s.\n\n", version(), run.seed, run.seed, bugNote(run.bug))
		newObserver = func(w io.Writer) scenarios.Observer { return &mermaidObserver{out: w} }
	default:
		newObserver = func(w io.Writer) scenarios.Observer {
			s := &storyObserver{out: w, p: p, verbose: run.format == formatVerbose, width: app.Env.Width, pace: pace, changed: changed}
			if run.format == formatTimeline {
				// A picture is drawn for 80 columns unless the terminal is
				// known to be wider, and its text wraps with it.
				s.width = wrapOr(app.Env.Width, 80)
				return timelineObserver{s}
			}
			if class != nil {
				return classroomObserver{story: s, c: class}
			}
			return s
		}
	}
	if human && run.recipe != "" {
		// The recipe carries its own seed and schedule: the same run every time.
		fmt.Fprintf(out, "bank-sim %s · recipe %s (its own seed and schedule: the same run every time)\n", version(), run.recipe)
	} else if human {
		repeat := fmt.Sprintf("--seed %d", run.seed)
		if run.bug != nil {
			repeat += " --bug " + run.bug.Name
		}
		fmt.Fprintf(out, "bank-sim %s · seed %d (repeat this run with %s)\n", version(), run.seed, repeat)
		if run.bug != nil {
			fmt.Fprintf(out, "%s\n", p.warn.Sprintf("bug %s is on in every protected phase: %s", run.bug.Name, run.bug.Mistake))
		}
	}
	// Stories of their own servers (the failover story's primary and
	// standby) need no other: run alone, they start or reach nothing else.
	// database is the run's server, or what the stories run on without one.
	var srv *postgres.Server
	note := ownServersNote(app, run.list)
	database := note
	if needsServer(run.list) {
		srv, err = app.Server(ctx)
		if err != nil {
			if class != nil {
				class.finish("PostgreSQL could not be started", false, "see the terminal")
			}
			return err
		}
		database = app.describe(srv)
		if human {
			printWrapped(out, database, app.Env.Width, p.dim)
		}
	}
	if human && note != "" {
		printWrapped(out, note, app.Env.Width, p.dim)
	}

	start := time.Now()
	made := banks.OnServer(srv, banks.Options{Async: true})
	// One recycler for the whole run: a bank a scenario has finished with
	// is reset for the next, connections and all, instead of dropped.
	shared, closeBanks := banks.Recycled(made)
	reports, finished, err := executeAll(runCtx, run.list, shared, run.seed, run.opts, parallel, out, newObserver)
	closeBanks()
	made.Wait()
	elapsed := time.Since(start)
	interrupted := runCtx.Err() != nil
	if err != nil && !interrupted {
		return &ExitError{Code: ExitDatabase, Err: err}
	}
	var done []scenarios.Report
	for i, r := range reports {
		if finished[i] {
			done = append(done, r)
		}
	}

	var junitErr error
	if o.junit != "" {
		junitErr = writeJUnit(o.junit, done, elapsed, run.seed, run.bug)
	}
	if class != nil {
		passed, failed := tally(done)
		switch {
		case interrupted:
			class.finish("stopped", false, "stopped in the terminal; nothing left running")
		case len(done) == 1:
			class.finish(storyVerdict(done[0])+" ("+done[0].Scenario+")", done[0].Passed, "the end")
		default:
			class.finish(fmt.Sprintf("%d passed, %d failed", passed, failed), failed == 0, "the end")
		}
	}
	var htmlErr error
	if o.html != "" && len(done) > 0 {
		htmlErr = writeHTML(app.Env, o.html, storyDoc(done, run.seed, run.bug, changed, interrupted))
	}
	switch run.format {
	case formatJSON:
		passed, failed := tally(done)
		doc := jsonRun{Seed: run.seed, Bug: bugName(run.bug), Changes: changed, Database: database,
			Passed: passed, Failed: failed, Interrupted: interrupted, Duration: elapsed, Reports: done}
		if doc.Reports == nil {
			doc.Reports = []scenarios.Report{}
		}
		if err := writeJSON(out, doc); err != nil {
			return err
		}
	case formatMermaid:
		passed, failed := tally(done)
		fmt.Fprintf(out, "%d passed, %d failed.\n", passed, failed)
	default:
		if interrupted {
			interruptedSummary(out, p, run.list, reports, finished)
		} else {
			summary(out, p, done, elapsed)
		}
	}
	if junitErr != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim: %v\n", junitErr)
	}
	if htmlErr != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim: %v\n", htmlErr)
	}
	switch {
	case interrupted && ctx.Err() == nil && pace != nil && pace.quitWasPressed():
		return &ExitError{Code: ExitInterrupted, Err: errors.New("stopped at q; PostgreSQL stopped, nothing left running")}
	case interrupted:
		return ctx.Err()
	case junitErr != nil, htmlErr != nil:
		return &ExitError{Code: ExitFailed, Err: errors.New("")}
	}
	if _, failed := tally(done); failed > 0 {
		return errFailed
	}
	return nil
}

// needsServer reports whether any of the stories runs on the run's
// PostgreSQL (bank-sim's own embedded server, or --database-url).
func needsServer(list []scenarios.Scenario) bool {
	for _, s := range list {
		if !s.OwnServers {
			return true
		}
	}
	return false
}

// ownServersNote says which of the stories run on servers of their own,
// and so not on the run's server (above it in the header, when others
// need one) nor on the user's database; "" when none does.
func ownServersNote(app *App, list []scenarios.Scenario) string {
	var names []string
	for _, s := range list {
		if s.OwnServers {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	note := strings.Join(names, ", ") + " always runs on a primary and a standby of its own, which bank-sim starts for each phase"
	switch {
	case needsServer(list):
		note += ", not on the server above"
	case app.externalURL() != "":
		note += ": it does not use " + app.urlSource()
	}
	return note
}

// interruptedSummary says how far an interrupted run got: how many
// scenarios finished, and their verdicts.
func interruptedSummary(out io.Writer, p *palette, list []scenarios.Scenario, reports []scenarios.Report, finished []bool) {
	n := 0
	for _, f := range finished {
		if f {
			n++
		}
	}
	fmt.Fprintf(out, "\n%s\n", p.warn.Sprintf("interrupted: %d of %d scenarios finished", n, len(list)))
	for i, s := range list {
		switch {
		case !finished[i]:
		case reports[i].Passed:
			fmt.Fprintf(out, "%s %s\n", p.ok.Sprint("PASS"), s.Name)
		default:
			fmt.Fprintf(out, "%s %s: %s\n", p.bad.Sprint("FAIL"), s.Name, shortIDs(reports[i].Verdict))
		}
	}
}

func changeList(o scenarios.Options) []string {
	var out []string
	for _, f := range o.Faults {
		out = append(out, "--fault "+f.String())
	}
	if o.Amount > 0 {
		out = append(out, "--amount "+nairaFlag(o.Amount))
	}
	return out
}

func bugName(b *mistakes.Bug) string {
	if b == nil {
		return ""
	}
	return b.Name
}

func bugNote(b *mistakes.Bug) string {
	if b == nil {
		return ""
	}
	return ", with bug " + b.Name + " on in every protected phase"
}

// jsonRun is scenario --json: one document for the whole run.
type jsonRun struct {
	Seed        uint64             `json:"seed,string"`
	Bug         string             `json:"bug,omitempty"`
	Changes     []string           `json:"changes,omitempty"`
	Database    string             `json:"database"`
	Passed      int                `json:"passed"`
	Failed      int                `json:"failed"`
	Interrupted bool               `json:"interrupted,omitempty"`
	Duration    time.Duration      `json:"durationNs"`
	Reports     []scenarios.Report `json:"reports"`
}

// executeAll runs the scenarios, up to parallel at once, each on its own
// databases. Stories print in the order of the list: the first unfinished
// scenario writes straight to out, as it happens; the others write to
// buffers that are flushed when their turn comes. finished says which ran
// to the end; an interrupted run starts no more.
func executeAll(ctx context.Context, list []scenarios.Scenario, dbs banks.Databases, seed uint64, opts scenarios.Options,
	parallel int, out io.Writer, newObserver func(io.Writer) scenarios.Observer) ([]scenarios.Report, []bool, error) {
	ordered := newOrderedOutput(out, len(list))
	reports := make([]scenarios.Report, len(list))
	finished := make([]bool, len(list))
	errs := make([]error, len(list))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	// Scenarios start in the list's order, so that the one printing live is
	// the one running, and an interruption leaves the first ones finished;
	// but a story of its own servers starts first, beside the others: it
	// takes longer than the rest together (it starts two servers for each
	// phase), and would otherwise start last and end the run alone. One at
	// a time (--step, --pace) keeps the list's order: the story running
	// is the one on screen.
	first := func(s scenarios.Scenario) bool { return s.OwnServers && parallel > 1 }
	order := make([]int, 0, len(list))
	for i, s := range list {
		if first(s) {
			order = append(order, i)
		}
	}
	for i, s := range list {
		if !first(s) {
			order = append(order, i)
		}
	}
	for _, i := range order {
		s := list[i]
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var obs scenarios.Observer
			if newObserver != nil {
				obs = newObserver(ordered.writer(i))
			}
			reports[i], errs[i] = scenarios.ExecuteWith(ctx, s, dbs, seed, obs, opts)
			if errs[i] != nil {
				errs[i] = fmt.Errorf("scenario %s: %w", s.Name, errs[i])
				return
			}
			// Every phase read its ledger after its work, so an interruption
			// that came later cut nothing short.
			finished[i] = true
			ordered.done(i)
		}()
	}
	wg.Wait()
	return reports, finished, errors.Join(errs...)
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

func faultsNames() []string    { return faults.Names() }
func connFaultNames() []string { return faults.ConnNames() }

// nairaFlag spells kobo as --amount takes it: "5000", "99.50".
func nairaFlag(kobo int64) string {
	if kobo%100 == 0 {
		return strconv.FormatInt(kobo/100, 10)
	}
	return fmt.Sprintf("%d.%02d", kobo/100, kobo%100)
}
