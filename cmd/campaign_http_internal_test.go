package cmd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
)

// Issue 30, item 3: a campaign's seed that failed over HTTP with a mistake
// only the HTTP layer has (api's ReencodedReplays: replays decoded and
// encoded again) cannot be shrunk: a free run does not repeat. Its
// deterministic twin in process runs instead, breaks no rule, and the
// report says so: no recipe (nothing written to --save-recipe), the repeat
// line promises its intents and faults only, the JUnit failure says why.
// Its shard's file keeps the twin, so the merge neither runs PostgreSQL
// nor promises a recipe. It catches a shrink that takes the free run's
// history, and a report that offers "repeat it" with --deterministic.
func TestAFailureOverHTTPOnlyHasNoRecipe(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 3*time.Minute, errors.New("the campaign did not finish within 3 minutes"))
	defer cancel()
	var out, errOut bytes.Buffer
	app := &App{Env: &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start}}
	defer app.close()
	srv, err := app.Server(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dbs := banks.OnServer(srv, banks.Options{})
	dir := t.TempDir()
	o := chaosOptions{recipe: filepath.Join(dir, "r.json"), junit: filepath.Join(dir, "c.xml"), httpEvery: 1}
	bug := mistakes.Bug{Name: "reencoded-replays", API: api.Flaws{ReencodedReplays: true}}
	// Seed 43 at 200 intents over HTTP: replay-differs (see
	// chaos.TestCampaignOverHTTPCatchesWhatOnlyHTTPHas, and why not 50).
	cfg := chaos.Config{Clients: 8, Intents: 200, Bug: &bug, Deterministic: true}.WithDefaults()
	seeds := []uint64{43}
	results := chaos.Campaign(ctx, dbs, cfg, seeds, chaos.CampaignOptions{HTTP: chaos.HTTPSeeds(seeds, 1)})
	first := chaos.FirstFailing(results)
	if first == nil || !first.HTTP || first.First.Kind != chaos.KindReplay {
		t.Fatalf("seed 43 over HTTP with the mistake: %+v, want INVALID %s over HTTP", results[0], chaos.KindReplay)
	}
	recipe, err := shrinkFirst(ctx, app, o, cfg, first, dbs, true)
	if err != nil || recipe != nil {
		t.Fatalf("shrinking a failure over HTTP only: recipe %v, err %v; want none and no error (its twin in process breaks no rule)\n%s", recipe, err, errOut.String())
	}
	if tw := first.Twin; tw == nil || tw.Verdict == chaos.Invalid || tw.Steps == 0 || tw.Hash == "" {
		t.Fatalf("its twin in process: %+v; want a deterministic run (steps, hash) that broke no rule", tw)
	}
	if !strings.Contains(errOut.String(), "seed 43 broke a rule over HTTP, in a free run that no shrink repeats: running its deterministic twin in process") {
		t.Errorf("stderr should say the twin runs:\n%s", errOut.String())
	}

	run := campaignRun{cfg: cfg, seeds: "43", shard: shard{1, 1}, httpEvery: 1, results: results, first: first}
	out.Reset()
	err = reportCampaign(app, campaignReport{junit: o.junit, recipe: o.recipe}, run)
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != ExitFailed {
		t.Errorf("the campaign's exit: %v, want %d", err, ExitFailed)
	}
	report := out.String()
	for _, want := range []string{
		"43  ", "over HTTP (free run)",
		"first failing seed 43 (over HTTP): replay-differs ",
		"repeat its intents and faults: bank-sim chaos --http --seed 43 --intents 200 ",
		"its deterministic twin in process (--deterministic --seed 43 with these flags) broke no rule (",
		"the mistake shows over HTTP only (api/, the fault proxies, the retrying client), and a free run cannot be shrunk: no recipe (nothing written to " + o.recipe + ")",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report should say %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "repeat it: ") || strings.Contains(report, "--deterministic --seed 43 --intents") {
		t.Errorf("the report promises to repeat a free run exactly:\n%s", report)
	}
	if _, err := os.Stat(o.recipe); !os.IsNotExist(err) {
		t.Errorf("a recipe was written to %s (%v), with nothing shrunk", o.recipe, err)
	}
	xml, _ := os.ReadFile(o.junit)
	for _, want := range []string{`<property name="http-every" value="1">`, "over HTTP, a free run: it repeats its intents and faults, not its interleaving (no steps, no history hash)",
		"repeat its intents and faults: bank-sim chaos --http --seed 43", "its deterministic twin in process (--deterministic --seed 43 with these flags) broke no rule"} {
		if !strings.Contains(string(xml), want) {
			t.Errorf("JUnit should say %q:\n%s", want, xml)
		}
	}

	// The file keeps the twin: the merge runs nothing and promises no
	// recipe. (The merge looks its mistake up in the catalogue, which has
	// none of the HTTP layer's: the file is saved without it.)
	path := filepath.Join(dir, "c.json")
	saved := run
	saved.cfg.Bug = nil
	if err := saveCampaign(path, saved); err != nil {
		t.Fatal(err)
	}
	f, err := loadCampaign(path)
	if err != nil {
		t.Fatal(err)
	}
	merged, recipe, err := mergeCampaign([]string{path}, []*campaignFile{f})
	if err != nil || recipe != nil || merged.first == nil || merged.first.Twin == nil || !merged.first.HTTP || merged.first.Hash != "" {
		t.Fatalf("merged: first %+v, recipe %v, err %v; want seed 43 over HTTP with its twin, no hash, no recipe", merged.first, recipe, err)
	}
	var mout bytes.Buffer
	mapp := &App{Env: &Env{Stdin: strings.NewReader(""), Stdout: &mout, Stderr: &mout, Getenv: func(string) string { return "" },
		Postgres: func(context.Context, postgres.Options) (*postgres.Server, error) {
			t.Error("the merge started PostgreSQL to shrink a seed whose twin broke no rule")
			return nil, errors.New("not allowed")
		}}}
	_ = runMerge(newCheckCmd(mapp), mapp, []string{path}, mergeOptions{recipe: filepath.Join(dir, "m.json")})
	if !strings.Contains(mout.String(), "broke no rule") || strings.Contains(mout.String(), "its shard's file holds no recipe") {
		t.Errorf("the merge should say the twin broke no rule, not offer to shrink:\n%s", mout.String())
	}
}
