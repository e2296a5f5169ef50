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
	"github.com/banksim/bank-sim/scenarios"
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
	return fmt.Sprintf("seed %d · free-running: --seed %d repeats the intents and the fault of every attempt, not the interleaving of the clients (add --deterministic to repeat the whole run)", cfg.Seed, cfg.Seed)
}

// shrinkRun shrinks a failing deterministic run to a recipe, saving it to
// --save-recipe. Progress lines go to stderr, so that stdout keeps the
// report (and --json stays JSON).
func shrinkRun(ctx context.Context, app *App, o chaosOptions, cfg chaos.Config, h *chaos.History, dbs scenarios.Databases, tell bool) (*chaos.Recipe, error) {
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

// runCampaign runs every seed of --seeds deterministically and prints the
// table, the first failing seed shrunk to a recipe, and the JUnit report.
func runCampaign(c *cobra.Command, app *App, o chaosOptions, cfg chaos.Config) error {
	seeds, err := chaos.ParseSeeds(o.seeds)
	if err != nil {
		return usageError("--seeds %s: %v", o.seeds, err)
	}
	ctx := c.Context()
	out := app.Env.Stdout
	p := app.palette()
	if !o.asJSON {
		fmt.Fprintf(out, "bank-sim %s · chaos campaign · %s · deterministic: each seed repeats exactly (bank-sim chaos --deterministic --seed N with these flags)\n",
			version(), count(len(seeds), "seed", "seeds"))
	}
	srv, err := app.Server(ctx)
	if err != nil {
		return err
	}
	if !o.asJSON {
		fmt.Fprintf(out, "%s\n", p.dim.Sprint(srv.Describe()))
		fmt.Fprintf(out, "%s\n", describeConfig(cfg))
	}
	start := time.Now()
	// A bar on a terminal; piped (or with --json), lines on stderr, as
	// chaos's own progress.
	prog := &campaignProgress{out: app.Env.Stderr, start: start, total: len(seeds)}
	if app.Env.Terminal && !o.asJSON {
		prog.out, prog.terminal = out, true
	}
	dbs := scenarios.ServerBanks(srv)
	opts := chaos.CampaignOptions{Parallel: o.parallel, Done: prog.done}
	results := chaos.Campaign(ctx, dbs, cfg, seeds, opts)
	prog.clear()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	elapsed := time.Since(start)

	var recipe *chaos.Recipe
	var recipeErr error
	first := chaos.FirstFailing(results)
	if first != nil {
		fc := cfg
		fc.Seed = uint64(first.Seed)
		recipe, recipeErr = shrinkRun(ctx, app, o, fc, first.History, dbs, !o.asJSON)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if o.junit != "" {
		if err := writeCampaignJUnit(o.junit, cfg, results, elapsed, first, recipe); err != nil {
			return &ExitError{Code: ExitFailed, Err: err}
		}
	}
	tally := chaos.Tally(results)
	if o.asJSON {
		if err := writeJSON(out, campaignJSON{Seeds: results, Tally: tally, FirstFailing: firstSeed(first), Recipe: recipe,
			Duration: elapsed}); err != nil {
			return err
		}
	} else {
		printCampaign(out, p, results, tally, elapsed)
		if first != nil {
			fmt.Fprintf(out, "\n%s seed %d: %s %s\n", p.bad.Sprint("first failing"), uint64(first.Seed), p.bold.Sprint(first.First.Kind), first.First.Detail)
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("repeat it: bank-sim chaos --deterministic --seed %d%s", uint64(first.Seed), campaignFlags(cfg)))
			if recipe != nil {
				printRecipe(out, p, recipe, o.recipe)
			}
		}
		if o.junit != "" {
			fmt.Fprintf(out, "%s\n", p.dim.Sprintf("JUnit report written to %s", o.junit))
		}
	}
	if recipeErr != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim: %v\n", recipeErr)
	}
	switch {
	case tally[chaos.Invalid] > 0 || tally["ERROR"] > 0:
		return errFailed
	case tally[chaos.Inconclusive] > 0:
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
	Seeds        []chaos.SeedResult `json:"seeds"`
	Tally        map[string]int     `json:"tally"`
	FirstFailing *chaos.Seed        `json:"firstFailing,omitempty"`
	Recipe       *chaos.Recipe      `json:"recipe,omitempty"`
	Duration     time.Duration      `json:"durationNs"`
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

// printCampaign prints one line per seed and the tally.
func printCampaign(out io.Writer, p *palette, results []chaos.SeedResult, tally map[string]int, elapsed time.Duration) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\tintents\tfaults\tunknowns\tverdict\tsteps\thistory sha256\t\n")
	for _, r := range results {
		verdict := r.Verdict
		switch r.Verdict {
		case chaos.Valid:
			verdict = p.ok.Sprint(verdict)
		case chaos.Invalid:
			verdict = p.bad.Sprintf("%s (%s)", verdict, r.First.Kind)
		case chaos.Inconclusive:
			verdict = p.bad.Sprintf("%s (%d not reached)", verdict, len(r.Missing))
		default:
			verdict = p.bad.Sprintf("%s: %s", verdict, r.Error)
		}
		hash := r.Hash
		if len(hash) > 16 {
			hash = hash[:16]
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%d\t%s\t\n", uint64(r.Seed), r.Stats.Intents, r.Faults, r.Unknowns, verdict, r.Steps, hash)
	}
	_ = tw.Flush()
	var parts []string
	for _, v := range chaos.SortedVerdicts(tally) {
		parts = append(parts, fmt.Sprintf("%d %s", tally[v], v))
	}
	fmt.Fprintf(out, "\n%s of %s · %s\n", strings.Join(parts, ", "), count(len(results), "seed", "seeds"), elapsed.Round(time.Millisecond))
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
		fmt.Fprintf(c.out, "\r  [%s%s] %d/%d seeds · %d failing · %s ", strings.Repeat("█", filled), strings.Repeat("·", width-filled), done, total, c.failed, elapsed)
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
		fmt.Fprintf(c.out, "\r%s\r", strings.Repeat(" ", 72))
		c.drawn = false
	}
}

// writeCampaignJUnit writes one test case per seed: INVALID and
// INCONCLUSIVE seeds, and seeds that could not run, are failures.
func writeCampaignJUnit(path string, cfg chaos.Config, results []chaos.SeedResult, elapsed time.Duration, first *chaos.SeedResult, recipe *chaos.Recipe) error {
	suite := junitSuite{Name: "bank-sim chaos campaign", Time: elapsed.Seconds()}
	for _, r := range results {
		tc := junitCase{Name: fmt.Sprintf("seed %d", uint64(r.Seed)), Classname: "bank-sim.chaos", Time: r.Wall.Seconds(),
			SystemOut: fmt.Sprintf("verdict %s · %d intents · %d faults fired · %d unknown outcomes · %d steps · history sha256 %s\nrepeat: bank-sim chaos --deterministic --seed %d%s\n",
				r.Verdict, r.Stats.Intents, r.Faults, r.Unknowns, r.Steps, r.Hash, uint64(r.Seed), campaignFlags(cfg))}
		switch r.Verdict {
		case chaos.Valid:
		case chaos.Invalid:
			body := tc.SystemOut
			if first != nil && first.Seed == r.Seed && recipe != nil {
				body += "\n" + recipe.Text()
			}
			tc.Failure = &junitFailure{Message: r.First.Kind + ": " + r.First.Detail, Type: "InvariantViolation", Body: body}
		case chaos.Inconclusive:
			tc.Failure = &junitFailure{Message: "INCONCLUSIVE: " + strings.Join(r.Missing, "; "), Type: "Inconclusive", Body: tc.SystemOut}
		default:
			tc.Failure = &junitFailure{Message: r.Error, Type: "RunError", Body: tc.SystemOut}
		}
		if tc.Failure != nil {
			suite.Failures++
		}
		suite.Tests++
		suite.Cases = append(suite.Cases, tc)
	}
	return writeJUnitSuite(path, suite)
}
