package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/htmlreport"
	"github.com/banksim/bank-sim/internal/termtext"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/spf13/cobra"
)

// maxSafeSeed is the largest seed a JSON number carries intact in
// JavaScript and jq (2^53-1); a seed bank-sim picks itself stays below it.
const maxSafeSeed = 1<<53 - 1

// seedPromise says, in the banner, what the seed repeats and what it does
// not.
func seedPromise(cfg chaos.Config) string {
	if cfg.Deterministic {
		return fmt.Sprintf("seed %d · deterministic: --seed %d --deterministic with these flags repeats this run exactly, history and all", cfg.Seed, cfg.Seed)
	}
	if pl := cfg.Partition; pl != nil && pl.Of == chaos.PartitionApp {
		return fmt.Sprintf("seed %d · free-running: --seed %d repeats the intents, the fault of every attempt and the intents at which the cuts start, not the interleaving of the clients nor the moment a cut lands in it (a partition cannot be --deterministic)", cfg.Seed, cfg.Seed)
	}
	return fmt.Sprintf("seed %d · free-running: --seed %d repeats the intents and the fault of every attempt, not the interleaving of the clients (add --deterministic to repeat the whole run)", cfg.Seed, cfg.Seed)
}

// shrinkRun shrinks a failing deterministic run to a recipe, saving it to
// --save-recipe. Progress lines go to stderr, so that stdout keeps the
// report (and --json stays JSON).
func shrinkRun(ctx context.Context, app *App, o chaosOptions, cfg chaos.Config, h *chaos.History, dbs banks.Databases, tell bool) (*chaos.Recipe, error) {
	errOut := app.Env.Stderr
	if tell {
		fmt.Fprintf(errOut, "shrinking the run (seed %d): every candidate is a deterministic run…\n", cfg.Seed)
	}
	start := time.Now()
	r, err := chaos.Shrink(ctx, dbs, cfg, h, chaos.ShrinkOptions{Log: func(format string, args ...any) {
		if tell {
			fmt.Fprintf(errOut, "  "+format+"\n", args...)
		}
	}})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, runFailed(fmt.Errorf("shrink the run (seed %d): %w", cfg.Seed, err))
	}
	if tell {
		fmt.Fprintf(errOut, "shrunk in %s (%d runs)\n", time.Since(start).Round(time.Millisecond), r.Runs)
	}
	if o.recipe != "" {
		if err := r.Save(o.recipe); err != nil {
			return nil, &ExitError{Code: ExitFailed, Err: fmt.Errorf("write the recipe: %w", err)}
		}
	}
	return r, nil
}

// shrinkFirst shrinks a campaign's first failing seed to a recipe. A
// deterministic seed is shrunk from its history, run again when the history
// is not at hand (after a merge). A seed over HTTP was a free run, which no
// shrink repeats: its deterministic twin in process (the same seed and
// flags) runs instead, and is shrunk only if it breaks a rule too. first.Twin
// says how the twin went; when it broke no rule there is no recipe, and no
// error: the mistake shows over HTTP only.
func shrinkFirst(ctx context.Context, app *App, o chaosOptions, cfg chaos.Config, first *chaos.SeedResult, dbs banks.Databases, tell bool) (*chaos.Recipe, error) {
	fc := cfg
	fc.Seed = uint64(first.Seed)
	fc.HTTP, fc.Deterministic = false, true
	h := first.History
	if first.HTTP || h == nil {
		if tell && first.HTTP {
			fmt.Fprintf(app.Env.Stderr, "seed %d broke a rule over HTTP, in a free run that no shrink repeats: running its deterministic twin in process (bank-sim chaos --deterministic --seed %d with these flags)…\n", fc.Seed, fc.Seed)
		}
		var err error
		if h, err = chaos.RunOn(ctx, dbs, fc, nil); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, runFailed(fmt.Errorf("chaos run (seed %d): %w", fc.Seed, err))
		}
		if first.HTTP {
			first.Twin = chaos.TwinOf(fc.Seed, h)
			if first.Twin.Verdict != chaos.Invalid {
				return nil, nil
			}
		}
	}
	return shrinkRun(ctx, app, o, fc, h, dbs, tell)
}

// twinNote says what the deterministic twin in process of a seed that
// failed over HTTP showed, and so whether the recipe is the twin's or
// there is none; "" for a seed in process, or a twin not run.
func twinNote(r *chaos.SeedResult) string {
	tw := r.Twin
	if !r.HTTP || tw == nil {
		return ""
	}
	again := fmt.Sprintf("--deterministic --seed %d with these flags", uint64(r.Seed))
	if tw.Verdict == chaos.Invalid {
		return fmt.Sprintf("its deterministic twin in process (%s) broke a rule too (%s): the recipe is the twin's, shrunk", again, tw.Kind)
	}
	return fmt.Sprintf("its deterministic twin in process (%s) broke no rule (%s): the mistake shows over HTTP only (api/, the fault proxies, the retrying client), and a free run cannot be shrunk: no recipe", again, tw.Verdict)
}

// campaignPromise says, in a campaign's banner, what its seeds repeat:
// seeds, this machine's share of the list (all of it unless a shard), and
// http, the list's seeds over HTTP (every every-th of listed).
func campaignPromise(seeds []uint64, http map[uint64]bool, every, listed int) string {
	n := 0
	for _, s := range seeds {
		if http[s] {
			n++
		}
	}
	const det = "deterministic: each seed repeats exactly (bank-sim chaos --deterministic --seed N with these flags)"
	const free = "free runs, each repeats its intents and faults, not its interleaving (bank-sim chaos --http --seed N with these flags)"
	switch {
	case n == 0 && every > 0 && len(http) == 0:
		return fmt.Sprintf("%s · none over HTTP: --http-every %d sends the %s seed of the list, and it has %d", det, every, ordinal(every), listed)
	case n == 0:
		return det
	case n == len(seeds):
		return "over HTTP: " + free
	}
	return fmt.Sprintf("%d deterministic: each repeats exactly (bank-sim chaos --deterministic --seed N with these flags) · %d over HTTP (%s): %s",
		len(seeds)-n, n, everyNth(every), free)
}

// everyNth names the seeds --http-every n sends over HTTP: "every 4th
// seed", "every seed".
func everyNth(n int) string {
	if n == 1 {
		return "every seed"
	}
	return "every " + ordinal(n) + " seed"
}

// ordinal spells n as "1st", "2nd", "4th".
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// describeCampaign is describeConfig for a campaign whose every every-th
// seed goes over HTTP.
func describeCampaign(cfg chaos.Config, every int, http map[uint64]bool) string {
	s := describeConfig(cfg)
	if len(http) == 0 {
		return s
	}
	via := " in process, over HTTP for " + everyNth(every)
	if every == 1 {
		via = " over HTTP"
	}
	return strings.Replace(s, " in process", via, 1)
}

// printRecipe prints a recipe, and where it was saved.
func printRecipe(out io.Writer, p *palette, r *chaos.Recipe, saved string) {
	fmt.Fprintln(out)
	for i, line := range strings.Split(strings.TrimRight(r.Text(), "\n"), "\n") {
		if i == 0 {
			line = p.bold.Sprint(line)
		}
		fmt.Fprintln(out, line)
	}
	if saved != "" {
		fmt.Fprintf(out, "\n%s\n", p.dim.Sprintf("recipe written to %s (replay it with: bank-sim scenario --recipe %s)", saved, saved))
	}
}

// runCampaign runs every seed of --seeds (with --shard K/N, this machine's
// share of them), deterministically in process, and every --http-every-th
// seed of the list over HTTP, and prints the table, the first failing seed
// shrunk to a recipe, and the JUnit report; --campaign-out saves the
// results for 'bank-sim check --merge'.
func runCampaign(c *cobra.Command, app *App, o chaosOptions, cfg chaos.Config) error {
	all, err := chaos.ParseSeeds(o.seeds)
	if err != nil {
		return usageError("--seeds %s: %v", o.seeds, err)
	}
	sh, err := parseShard(o.shard, len(all))
	if err != nil {
		return err
	}
	seeds := chaos.Shard(all, sh.K, sh.N)
	// Which seeds go over HTTP is the whole list's: every shard agrees.
	httpSeeds := chaos.HTTPSeeds(all, o.httpEvery)
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		what := count(len(seeds), "seed", "seeds")
		if sh.sharded() {
			what = fmt.Sprintf("shard %s: %d of %s", sh, len(seeds), count(len(all), "seed", "seeds"))
		}
		fmt.Fprintf(out, "bank-sim %s · chaos campaign · %s · %s\n", version(), what, campaignPromise(seeds, httpSeeds, o.httpEvery, len(all)))
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	if !o.asJSON {
		fmt.Fprintf(out, "%s\n", p.dim.Sprint(srv.Describe()))
		fmt.Fprintf(out, "%s\n", describeCampaign(cfg, o.httpEvery, httpSeeds))
	}
	start := time.Now()
	// A bar on a terminal; piped (or with --json), lines on stderr, as
	// chaos's own progress.
	prog := &campaignProgress{out: app.Env.Stderr, start: start, total: len(seeds)}
	if app.Env.Terminal && !o.asJSON {
		prog.out, prog.terminal = out, true
	}
	dbs := banks.OnServer(srv, banks.Options{})
	opts := chaos.CampaignOptions{Parallel: o.parallel, Done: prog.done, HTTP: httpSeeds}
	results := chaos.Campaign(ctx, dbs, cfg, seeds, opts)
	prog.clear()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	run := campaignRun{cfg: cfg, seeds: o.seeds, shard: sh, httpEvery: o.httpEvery, results: results, elapsed: time.Since(start)}

	var recipeErr error
	run.first = chaos.FirstFailing(results)
	if run.first != nil {
		run.recipe, recipeErr = shrinkFirst(ctx, app, o, cfg, run.first, dbs, !o.asJSON)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	// The report first: results that cannot be saved must not cost it.
	var saveErr error
	if o.campaignOut != "" {
		saveErr = saveCampaign(o.campaignOut, run)
	}
	err = reportCampaign(app, campaignReport{asJSON: o.asJSON, junit: o.junit, recipe: o.recipe, out: o.campaignOut, saved: saveErr == nil, html: o.html}, run)
	if recipeErr != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim: %v\n", recipeErr)
	}
	if saveErr != nil {
		return &ExitError{Code: ExitFailed, Err: saveErr}
	}
	return err
}

// campaignRun is a campaign's outcome: run here (the whole or one shard),
// or merged from the shards' result files.
type campaignRun struct {
	cfg   chaos.Config
	seeds string // --seeds as given: the whole campaign's list
	shard shard  // 1/1 for a whole campaign
	// httpEvery is --http-every: every httpEvery-th seed of the list went
	// over HTTP (none when 0).
	httpEvery int
	results   []chaos.SeedResult
	elapsed   time.Duration
	first     *chaos.SeedResult
	recipe    *chaos.Recipe
	// merged is how many shards' files were merged; 0 for a run here.
	merged int
}

// judged reports whether the run judges coverage: a shard's seeds are only
// a share of the campaign's, whose coverage is the union of every shard's,
// judged when they are merged.
func (r campaignRun) judged() bool { return r.merged > 0 || !r.shard.sharded() }

// campaignReport says how to report a campaign: the flags of chaos --seeds,
// or of check --merge.
type campaignReport struct {
	asJSON bool
	junit  string
	recipe string // where the recipe was saved
	out    string // --campaign-out
	saved  bool   // --campaign-out was written
	html   string // --html
}

// reportCampaign writes the JUnit report and prints the campaign (or its
// JSON), and returns its exit: 1 when a seed broke a rule or could not run,
// else 4 when its seeds together never exercised some defence, else 0. A
// shard's run judges only the rules: its coverage is judged at the merge.
func reportCampaign(app *App, rep campaignReport, run campaignRun) error {
	out := app.Env.Stdout
	p := app.palette()
	verdict, union := chaos.Judge(run.results, run.cfg.Faults)
	if rep.junit != "" {
		if err := writeCampaignJUnit(rep.junit, run, verdict, union); err != nil {
			return &ExitError{Code: ExitFailed, Err: err}
		}
	}
	if rep.html != "" {
		if err := writeHTML(app.Env, rep.html, campaignHTML(run, verdict, union)); err != nil {
			return err
		}
	}
	tally := chaos.Tally(run.results)
	if rep.asJSON {
		j := campaignJSON{HTTPEvery: run.httpEvery, Seeds: run.results, Tally: tally, FirstFailing: firstSeed(run.first), Recipe: run.recipe, Duration: run.elapsed}
		if run.shard.sharded() && run.merged == 0 {
			j.Shard = &run.shard
		}
		if run.judged() || verdict == chaos.Invalid {
			j.Verdict = verdict
		}
		if run.judged() {
			j.NotReached = append([]string{}, union.Missing()...)
		}
		if err := writeJSON(out, j); err != nil {
			return err
		}
	} else {
		printCampaign(out, p, run, tally)
		switch {
		case !run.judged():
			fmt.Fprintf(out, "%s\n", p.dim.Sprint("coverage: judged over every shard's seeds together, when their files are merged (bank-sim check --merge)"))
		case verdict == chaos.Inconclusive:
			fmt.Fprintf(out, "\n%s no seed exercised:\n", p.bad.Sprint("INCONCLUSIVE coverage:"))
			for _, m := range union.Missing() {
				fmt.Fprintf(out, "   - %s\n", m)
			}
			fmt.Fprintf(out, "%s\n", p.dim.Sprint("more seeds or more intents (--intents) reach every defence"))
		case tally[chaos.Inconclusive] > 0:
			own := "its"
			if tally[chaos.Inconclusive] > 1 {
				own = "their"
			}
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("coverage: the seeds together took every defence path and fired every fault (%s on %s own missed some)",
				count(tally[chaos.Inconclusive], "seed", "seeds"), own))
		}
		if first := run.first; first != nil {
			via := ""
			if first.HTTP {
				via = " (over HTTP)"
			}
			fmt.Fprintf(out, "\n%s seed %d%s: %s %s\n", p.bad.Sprint("first failing"), uint64(first.Seed), via, p.bold.Sprint(first.First.Kind), first.First.Detail)
			if first.HTTP {
				fmt.Fprintf(out, "%s\n", p.dim.Sprintf("repeat its intents and faults: %s (a free run: not its interleaving, so the rule may hold the next time)", first.Repeat(campaignFlags(run.cfg))))
			} else {
				fmt.Fprintf(out, "%s\n", p.dim.Sprintf("repeat it: %s", first.Repeat(campaignFlags(run.cfg))))
			}
			note := twinNote(first)
			if note != "" && run.recipe == nil && rep.recipe != "" {
				note += fmt.Sprintf(" (nothing written to %s)", rep.recipe)
			}
			if note != "" {
				fmt.Fprintf(out, "%s\n", p.dim.Sprint(note))
			}
			switch {
			case run.recipe != nil:
				printRecipe(out, p, run.recipe, rep.recipe)
			case run.merged > 0 && first.HTTP && first.Twin == nil:
				fmt.Fprintf(out, "%s\n", p.dim.Sprint("its shard's file holds no recipe: --shrink (or --save-recipe FILE) runs its deterministic twin in process, and shrinks it if it breaks a rule too"))
			case run.merged > 0 && !first.HTTP:
				fmt.Fprintf(out, "%s\n", p.dim.Sprint("its shard's file holds no recipe: shrink it with --shrink (or --save-recipe FILE), which runs it again"))
			}
		}
		if rep.out != "" && rep.saved {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("results written to %s (merge the shards' files with: bank-sim check --merge FILE…)", rep.out))
		}
		if rep.junit != "" {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("JUnit report written to %s", rep.junit))
		}
	}
	switch {
	case verdict == chaos.Invalid:
		return errFailed
	case verdict == chaos.Inconclusive && run.judged():
		return errInconclusive
	}
	return nil
}

func firstSeed(r *chaos.SeedResult) *chaos.Seed {
	if r == nil {
		return nil
	}
	s := r.Seed
	return &s
}

type campaignJSON struct {
	// Verdict is the campaign's (chaos.Judge): a shard's only when one of
	// its seeds broke a rule, since its coverage is judged at the merge.
	Verdict string `json:"verdict,omitempty"`
	// NotReached is what no seed exercised (why a campaign is
	// INCONCLUSIVE).
	NotReached []string `json:"notReached,omitempty"`
	Shard      *shard   `json:"shard,omitempty"`
	// HTTPEvery is --http-every: every HTTPEvery-th seed of the list went
	// over HTTP (its "http" is set), none when 0.
	HTTPEvery    int                `json:"httpEvery"`
	Seeds        []chaos.SeedResult `json:"seeds"`
	Tally        map[string]int     `json:"tally"`
	FirstFailing *chaos.Seed        `json:"firstFailing,omitempty"`
	Recipe       *chaos.Recipe      `json:"recipe,omitempty"`
	Duration     time.Duration      `json:"durationNs"`
}

// campaignHTML is the campaign's HTML report.
func campaignHTML(run campaignRun, verdict string, union chaos.Coverage) *htmlreport.Doc {
	all, _ := chaos.ParseSeeds(run.seeds)
	r := htmlreport.CampaignRun{Seeds: run.seeds, Flags: strings.TrimSpace(campaignFlags(run.cfg)),
		Describe: strings.ReplaceAll(describeCampaign(run.cfg, run.httpEvery, chaos.HTTPSeeds(all, run.httpEvery)), "\n", " · "),
		Results:  run.results, Verdict: verdict, Union: union, Judged: run.judged(), Merged: run.merged,
		First: run.first, Recipe: run.recipe, Elapsed: run.elapsed, Rates: run.cfg.Faults}
	if run.first != nil {
		r.FirstNote = twinNote(run.first)
	}
	if run.shard.sharded() && run.merged == 0 {
		r.Shard = run.shard.String()
	}
	return htmlreport.Campaign(r)
}

// campaignFlags are the flags that repeat one seed of a campaign.
func campaignFlags(cfg chaos.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, " --intents %d --clients %d --accounts %d --servers %d --attempts %d --faults %s", cfg.Intents, cfg.Clients, cfg.Accounts, cfg.Instances, cfg.MaxAttempts, cfg.Faults)
	if cfg.Bug != nil {
		fmt.Fprintf(&b, " --bug %s", cfg.Bug.Name)
	}
	return b.String()
}

// printCampaign prints one line per seed and the tally. An INCONCLUSIVE
// seed's line names what it did not reach.
func printCampaign(out io.Writer, p *palette, run campaignRun, tally map[string]int) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\tintents\tfaults\tunknowns\tverdict\tsteps\thistory sha256\t\n")
	overHTTP := 0
	for _, r := range run.results {
		verdict := r.Verdict
		switch r.Verdict {
		case chaos.Valid:
			verdict = p.ok.Sprint(verdict)
		case chaos.Invalid:
			verdict = p.bad.Sprintf("%s (%s)", verdict, r.First.Kind)
		case chaos.Inconclusive:
			verdict = p.warn.Sprintf("%s (not reached: %s)", verdict, notReached(r, run.cfg.Faults, 3))
		default:
			verdict = p.bad.Sprintf("%s: %s", verdict, r.Error)
		}
		steps, hash := fmt.Sprint(r.Steps), r.Hash
		if len(hash) > 16 {
			hash = hash[:16]
		}
		if r.HTTP {
			// A free run's history does not repeat: nothing to show.
			steps, hash = "-", "over HTTP (free run)"
			overHTTP++
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", uint64(r.Seed), r.Stats.Intents, r.Faults, r.Unknowns, verdict, steps, hash)
	}
	_ = tw.Flush()
	var parts []string
	for _, v := range chaos.SortedVerdicts(tally) {
		parts = append(parts, fmt.Sprintf("%d %s", tally[v], v))
	}
	fmt.Fprintf(out, "\n%s of %s · %s\n", strings.Join(parts, ", "), count(len(run.results), "seed", "seeds"), run.elapsed.Round(time.Millisecond))
	if overHTTP > 0 {
		fmt.Fprintf(out, "%s\n", p.dim.Sprintf("over HTTP (%s of --seeds): %s, each a free run through api/'s servers, the fault proxies and the retrying client; it repeats its intents and faults, not its interleaving: no steps, no history hash",
			everyNth(run.httpEvery), count(overHTTP, "seed", "seeds")))
	}
}

// notReached names what seed r did not reach, at most n of them and how
// many more.
func notReached(r chaos.SeedResult, rates chaos.Rates, n int) string {
	if r.Coverage == nil {
		return strings.Join(r.Missing, "; ")
	}
	names := r.Coverage.Coverage(rates).Unreached()
	if len(names) > n {
		return fmt.Sprintf("%s +%d more", strings.Join(names[:n], ", "), len(names)-n)
	}
	return strings.Join(names, ", ")
}

// count spells a count with its noun: "1 seed", "20 seeds".
func count(n int, one, many string) string {
	return fmt.Sprintf("%d %s", n, plural(n, one, many))
}

// campaignProgress shows a campaign's progress: a bar redrawn on a
// terminal; otherwise a line on stderr each time another tenth of the seeds
// is done.
type campaignProgress struct {
	out      io.Writer
	terminal bool
	start    time.Time
	total    int
	mu       sync.Mutex
	failed   int
	lastLine int
	drawn    bool
}

func (c *campaignProgress) done(r chaos.SeedResult, done, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Verdict == chaos.Invalid || r.Verdict == "ERROR" {
		c.failed++
	}
	elapsed := time.Since(c.start).Round(time.Second)
	if c.terminal {
		const width = 30
		filled := done * width / total
		fmt.Fprintf(termtext.Raw(c.out), "\r  [%s%s] %d/%d seeds · %d failing · %s ", strings.Repeat("█", filled), strings.Repeat("·", width-filled), done, total, c.failed, elapsed)
		c.drawn = true
		return
	}
	step := max(1, total/10)
	if done/step > c.lastLine || done == total {
		c.lastLine = done / step
		fmt.Fprintf(c.out, "bank-sim chaos: %d/%d seeds done · %d failing · %s\n", done, total, c.failed, elapsed)
	}
}

func (c *campaignProgress) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drawn {
		fmt.Fprintf(termtext.Raw(c.out), "\r%s\r", strings.Repeat(" ", 72))
		c.drawn = false
	}
}

// writeCampaignJUnit writes one test case per seed: an INVALID seed and a
// seed that could not run are failures; an INCONCLUSIVE seed is skipped,
// with what it did not reach, since the campaign judges coverage over all
// its seeds: in one more case, "coverage of every seed", that fails when no
// seed exercised some defence (skipped when a seed broke a rule; a shard's
// report has no such case).
func writeCampaignJUnit(path string, run campaignRun, verdict string, union chaos.Coverage) error {
	suite := junitSuite{Name: "bank-sim chaos campaign", Time: run.elapsed.Seconds()}
	suite.Properties = append(suite.Properties, junitProperty{"version", version()}, junitProperty{"seeds", run.seeds}, junitProperty{"flags", strings.TrimSpace(campaignFlags(run.cfg))},
		junitProperty{"http-every", fmt.Sprint(run.httpEvery)})
	if run.shard.sharded() && run.merged == 0 {
		suite.Properties = append(suite.Properties, junitProperty{"shard", run.shard.String()})
	}
	for _, r := range run.results {
		tc := junitCase{Name: fmt.Sprintf("seed %d", uint64(r.Seed)), Classname: "bank-sim.chaos", Time: r.Wall.Seconds()}
		if r.HTTP {
			tc.SystemOut = fmt.Sprintf("verdict %s · over HTTP, a free run: it repeats its intents and faults, not its interleaving (no steps, no history hash) · %d intents · %d faults fired · %d unknown outcomes\nrepeat its intents and faults: %s\n",
				r.Verdict, r.Stats.Intents, r.Faults, r.Unknowns, r.Repeat(campaignFlags(run.cfg)))
		} else {
			tc.SystemOut = fmt.Sprintf("verdict %s · %d intents · %d faults fired · %d unknown outcomes · %d steps · history sha256 %s\nrepeat: %s\n",
				r.Verdict, r.Stats.Intents, r.Faults, r.Unknowns, r.Steps, r.Hash, r.Repeat(campaignFlags(run.cfg)))
		}
		switch r.Verdict {
		case chaos.Valid:
		case chaos.Invalid:
			body := tc.SystemOut
			if note := twinNote(&r); note != "" {
				body += note + "\n"
			}
			if run.first != nil && run.first.Seed == r.Seed && run.recipe != nil {
				body += "\n" + run.recipe.Text()
			}
			tc.Failure = &junitFailure{Message: r.First.Kind + ": " + r.First.Detail, Type: "InvariantViolation", Body: body}
		case chaos.Inconclusive:
			tc.Skipped = &junitSkipped{Message: "INCONCLUSIVE: broke no rule; not reached: " + notReached(r, run.cfg.Faults, 1<<30) +
				" (the campaign judges coverage over all its seeds)"}
			suite.Skipped++
		default:
			tc.Failure = &junitFailure{Message: r.Error, Type: "RunError", Body: tc.SystemOut}
		}
		if tc.Failure != nil {
			suite.Failures++
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, tc)
	}
	if run.judged() {
		tc := junitCase{Name: "coverage of every seed", Classname: "bank-sim.chaos",
			SystemOut: fmt.Sprintf("%s, their coverage together: every defence path taken and every fault fired by some seed\n", count(len(run.results), "seed", "seeds"))}
		switch m := union.Missing(); {
		case verdict == chaos.Invalid:
			// A broken rule is the campaign's verdict; what it did not
			// reach is no news beside it.
			tc.SystemOut = ""
			tc.Skipped = &junitSkipped{Message: "not judged: a seed broke a rule"}
			suite.Skipped++
		case len(m) > 0:
			tc.SystemOut = ""
			tc.Failure = &junitFailure{Message: "INCONCLUSIVE: no seed exercised " + strings.Join(union.Unreached(), ", "), Type: "Inconclusive",
				Body: "no seed exercised:\n  - " + strings.Join(m, "\n  - ") + "\nmore seeds or more intents (--intents) reach every defence\n"}
			suite.Failures++
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, tc)
	}
	return writeJUnitSuite(path, suite)
}
