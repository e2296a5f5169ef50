package cmd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/internal/userfile"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/spf13/cobra"
)

// shard is one machine's share of a campaign: shard K of N (from 1).
type shard struct {
	K int `json:"k"`
	N int `json:"n"`
}

func (s shard) String() string { return fmt.Sprintf("%d/%d", s.K, s.N) }

func (s shard) sharded() bool { return s.N > 1 }

// parseShard reads --shard K/N for a campaign of seeds seeds; "" is the
// whole campaign, 1/1.
func parseShard(s string, seeds int) (shard, error) {
	if s == "" {
		return shard{1, 1}, nil
	}
	k, n, ok := strings.Cut(s, "/")
	kv, err1 := strconv.Atoi(strings.TrimSpace(k))
	nv, err2 := strconv.Atoi(strings.TrimSpace(n))
	switch {
	case !ok || err1 != nil || err2 != nil:
		return shard{}, usageError("--shard %q: give K/N, this machine's shard K of N shards (for example --shard 2/4)", s)
	case nv < 1:
		return shard{}, usageError("--shard %s: give at least 1 shard", s)
	case kv < 1 || kv > nv:
		return shard{}, usageError("--shard %s: K is the shard this machine runs, from 1 to %d", s, nv)
	case nv > seeds:
		return shard{}, usageError("--shard %s: %s cannot be shared among %d shards; give at most %d", s, count(seeds, "seed", "seeds"), nv, seeds)
	}
	return shard{kv, nv}, nil
}

// campaignFileFormat names a campaign's result file; its version changes
// when its shape does (2: seeds over HTTP, httpEvery, a seed's http and
// twin, no steps or hash for a free run).
const (
	campaignFileFormat  = "bank-sim campaign result"
	campaignFileVersion = 2
)

// maxCampaignFile bounds what check --merge reads of one file: a whole
// campaign of 10,000 seeds writes about 20 MiB.
const maxCampaignFile = 64 << 20

// campaignFile is a campaign's results as --campaign-out writes them: one
// shard's, or a whole campaign's (shard 1/1). 'bank-sim check --merge'
// combines the files of every shard of one campaign: the same bank-sim, the
// same flags (ConfigSHA256), the same --seeds.
type campaignFile struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	BankSim string `json:"bankSim"`
	// Config is the campaign's, without a seed; ConfigSHA256 is its hash,
	// and Flags the flags that repeat one of its seeds.
	Config       chaos.Config `json:"config"`
	ConfigSHA256 string       `json:"configSha256"`
	Flags        string       `json:"flags"`
	// Seeds is the whole campaign's list, as --seeds gave it; Shard says
	// which share of it Results are.
	Seeds string `json:"seeds"`
	Shard shard  `json:"shard"`
	// HTTPEvery is --http-every: every HTTPEvery-th seed of the whole
	// list went over HTTP, as a free run (none when 0).
	HTTPEvery int                `json:"httpEvery"`
	Results   []chaos.SeedResult `json:"results"`
	// Recipe is the shard's first failing seed, shrunk.
	Recipe   *chaos.Recipe `json:"recipe,omitempty"`
	Duration time.Duration `json:"durationNs"`
}

// configHash identifies a campaign's configuration: two shards whose
// hashes differ ran different campaigns, whose seeds mean other runs.
func configHash(cfg chaos.Config) string {
	cfg.Seed = 0
	b, _ := json.Marshal(cfg)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// saveCampaign writes run's results to path, whole or not at all.
func saveCampaign(path string, run campaignRun) error {
	cfg := run.cfg
	cfg.Seed = 0
	f := campaignFile{Format: campaignFileFormat, Version: campaignFileVersion, BankSim: version(), Config: cfg, ConfigSHA256: configHash(cfg),
		Flags: strings.TrimSpace(campaignFlags(cfg)), Seeds: run.seeds, Shard: run.shard, HTTPEvery: run.httpEvery, Recipe: run.recipe, Duration: run.elapsed}
	for _, r := range run.results {
		// Coverage says in short what Missing spells out.
		r.Missing = nil
		f.Results = append(f.Results, r)
	}
	data, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("--campaign-out %s: %w", path, err)
	}
	return writeFileAtomic("--campaign-out", path, append(data, '\n'))
}

// loadCampaign reads one campaign result file, and refuses anything else,
// and a file too big to be one, in the user's terms.
func loadCampaign(path string) (*campaignFile, error) {
	tooBig := func() error {
		return usageError("%s is over %d MiB: not a campaign's result file (10,000 seeds write about 20 MiB)", path, maxCampaignFile>>20)
	}
	data, err := userfile.Read(context.Background(), path, maxCampaignFile, "a campaign's result file written by 'bank-sim chaos --seeds … --campaign-out FILE'")
	var bad *userfile.Error
	switch {
	case errors.As(err, &bad) && bad.TooBig:
		return nil, tooBig()
	case errors.As(err, &bad):
		return nil, usageError("%s", bad.Msg)
	case err != nil:
		return nil, usageError("cannot read %s (%s)", path, plainIOError(err))
	}
	var f campaignFile
	var syntax *json.SyntaxError
	dec := json.NewDecoder(bytes.NewReader(data))
	err = dec.Decode(&f)
	switch {
	case errors.As(err, &syntax):
		return nil, usageError("%s is not a campaign's result file: it is not JSON (at byte %d); write one with 'bank-sim chaos --seeds … --campaign-out FILE'", path, syntax.Offset)
	case err != nil:
		return nil, usageError("%s is not a campaign's result file: %s; write one with 'bank-sim chaos --seeds … --campaign-out FILE'", path, plainJSONError(err))
	case f.Format != campaignFileFormat:
		return nil, usageError("%s is not a campaign's result file (its format is %q, not %q); write one with 'bank-sim chaos --seeds … --campaign-out FILE'", path, f.Format, campaignFileFormat)
	case f.Version != campaignFileVersion:
		return nil, usageError("%s is a campaign's result file of version %d; this bank-sim reads version %d: merge it with the bank-sim that wrote it", path, f.Version, campaignFileVersion)
	}
	if f.Recipe != nil {
		if err := f.Recipe.Validate(); err != nil {
			return nil, usageError("%s: its recipe is broken: %v", path, err)
		}
	}
	return &f, nil
}

// plainJSONError says what was wrong with a JSON document without Go's
// type names.
func plainJSONError(err error) string {
	var shape *json.UnmarshalTypeError
	if errors.As(err, &shape) {
		return fmt.Sprintf("its field %q has the wrong type", shape.Field)
	}
	if errors.Is(err, io.EOF) {
		return "it is empty"
	}
	return err.Error()
}

// mergeCampaign combines the files of every shard of one campaign into the
// campaign, its results in --seeds' order, as if it had run on one machine.
// Files of different campaigns (bank-sim, flags, seeds or number of
// shards), a shard given twice, a shard missing, and a file whose seeds
// are not its shard's are refused: a merge must equal the whole campaign.
func mergeCampaign(paths []string, files []*campaignFile) (campaignRun, *chaos.Recipe, error) {
	f0, p0 := files[0], paths[0]
	all, err := chaos.ParseSeeds(f0.Seeds)
	if err != nil {
		return campaignRun{}, nil, usageError("%s: its seeds %q: %v", p0, f0.Seeds, err)
	}
	byShard := map[int]int{}
	for i, f := range files {
		p := paths[i]
		seeds, err := chaos.ParseSeeds(f.Seeds)
		switch {
		case err != nil:
			return campaignRun{}, nil, usageError("%s: its seeds %q: %v", p, f.Seeds, err)
		case f.BankSim != f0.BankSim:
			return campaignRun{}, nil, usageError("%s was written by bank-sim %s, %s by %s: a seed is the same run only with the same bank-sim; run every shard with one build", p, f.BankSim, p0, f0.BankSim)
		case f.ConfigSHA256 != f0.ConfigSHA256 || f.Flags != f0.Flags:
			return campaignRun{}, nil, usageError("%s and %s ran different campaigns (%s): run every shard with the same flags", p0, p, flagsDiffer(p0, f0, p, f))
		case !slices.Equal(seeds, all):
			return campaignRun{}, nil, usageError("%s ran --seeds %s, %s --seeds %s: run every shard with the same --seeds", p0, f0.Seeds, p, f.Seeds)
		case f.HTTPEvery != f0.HTTPEvery:
			return campaignRun{}, nil, usageError("%s ran --http-every %d, %s --http-every %d: run every shard with the same --http-every", p0, f0.HTTPEvery, p, f.HTTPEvery)
		case f.Shard.N != f0.Shard.N:
			return campaignRun{}, nil, usageError("%s is shard %s, %s shard %s: give the files of one campaign's shards, every one with the same N", p0, f0.Shard, p, f.Shard)
		case f.Shard.K < 1 || f.Shard.K > f.Shard.N:
			return campaignRun{}, nil, usageError("%s: shard %s does not exist", p, f.Shard)
		case configHash(f.Config) != f.ConfigSHA256:
			// The hash is of the config the file carries, not a label it
			// chose: a file edited after chaos wrote it is not that run.
			return campaignRun{}, nil, usageError("%s: its configSha256 is not the hash of its config (%s): the file was changed after chaos wrote it; merge the files chaos --campaign-out wrote", p, configHash(f.Config))
		case strings.TrimSpace(campaignFlags(f.Config)) != f.Flags:
			return campaignRun{}, nil, usageError("%s: its flags %q are not its config's (%q): the file was changed after chaos wrote it; merge the files chaos --campaign-out wrote", p, f.Flags, strings.TrimSpace(campaignFlags(f.Config)))
		}
		if j, ok := byShard[f.Shard.K]; ok {
			return campaignRun{}, nil, usageError("%s and %s are both shard %s: their seeds overlap; give each shard's file once", paths[j], p, f.Shard)
		}
		byShard[f.Shard.K] = i
		want := chaos.Shard(all, f.Shard.K, f.Shard.N)
		var got []uint64
		for _, r := range f.Results {
			got = append(got, uint64(r.Seed))
		}
		if !slices.Equal(got, want) {
			return campaignRun{}, nil, usageError("%s: shard %s of --seeds %s runs %s, but the file holds %s: it is not that shard's whole result", p, f.Shard, f0.Seeds,
				count(len(want), "seed", "seeds"), count(len(got), "seed", "seeds"))
		}
	}
	var missing []string
	for k := 1; k <= f0.Shard.N; k++ {
		if _, ok := byShard[k]; !ok {
			missing = append(missing, shard{k, f0.Shard.N}.String())
		}
	}
	if len(missing) > 0 {
		return campaignRun{}, nil, usageError("shard %s missing: give every shard's file (%d in all), or the campaign is not whole", strings.Join(missing, ", "), f0.Shard.N)
	}

	cfg := f0.Config.WithDefaults()
	if cfg.Bug != nil {
		// The mistake by its name: what it switches on is this build's.
		b, err := mistakes.Lookup(cfg.Bug.Name)
		if err != nil {
			return campaignRun{}, nil, usageError("%s: --bug %v", p0, err)
		}
		cfg.Bug = &b
	}
	cfg.Deterministic = true
	http := chaos.HTTPSeeds(all, f0.HTTPEvery)
	for i, f := range files {
		for _, r := range f.Results {
			err := checkVerdict(r, cfg.Faults)
			switch {
			case err != nil:
			case r.HTTP != http[uint64(r.Seed)]:
				err = fmt.Errorf("field \"http\" is %v, but --http-every %d sends it %s", r.HTTP, f0.HTTPEvery, map[bool]string{true: "over HTTP", false: "in process"}[http[uint64(r.Seed)]])
			case r.HTTP && (r.Steps != 0 || r.Hash != ""):
				err = fmt.Errorf("it went over HTTP, a free run whose history does not repeat, but its record gives steps or a history hash")
			}
			if err != nil {
				return campaignRun{}, nil, usageError("%s: seed %d: %v: the file was changed after chaos wrote it; merge the files chaos --campaign-out wrote", paths[i], uint64(r.Seed), err)
			}
		}
	}
	run := campaignRun{cfg: cfg, seeds: f0.Seeds, shard: shard{1, 1}, httpEvery: f0.HTTPEvery, merged: len(files)}
	result := map[uint64]chaos.SeedResult{}
	recipes := map[uint64]*chaos.Recipe{}
	for _, f := range files {
		run.elapsed = max(run.elapsed, f.Duration)
		for _, r := range f.Results {
			if r.Verdict == chaos.Inconclusive && r.Coverage != nil {
				r.Missing = r.Coverage.Coverage(cfg.Faults).Missing()
			}
			result[uint64(r.Seed)] = r
		}
		if f.Recipe != nil {
			recipes[uint64(f.Recipe.Seed)] = f.Recipe
		}
	}
	for _, s := range all {
		run.results = append(run.results, result[s])
	}
	run.first = chaos.FirstFailing(run.results)
	var recipe *chaos.Recipe
	if run.first != nil {
		recipe = recipes[uint64(run.first.Seed)]
	}
	return run, recipe, nil
}

// checkVerdict says what is wrong when a seed's verdict is not one
// bank-sim writes, or not the one its own record gives: the exit code, the
// table and JUnit all read the verdict, so it must be the evidence's.
func checkVerdict(r chaos.SeedResult, faults chaos.Rates) error {
	var want string
	switch {
	case r.Error != "":
		want = "ERROR"
	case r.First != nil:
		want = chaos.Invalid
	case r.Coverage == nil:
		return fmt.Errorf("field \"coverage\" is missing (every seed that ran records what it exercised)")
	case len(r.Coverage.Coverage(faults).Missing()) > 0:
		want = chaos.Inconclusive
	default:
		want = chaos.Valid
	}
	switch r.Verdict {
	case chaos.Valid, chaos.Invalid, chaos.Inconclusive, "ERROR":
	default:
		return fmt.Errorf("field \"verdict\" is %q, not a verdict bank-sim writes (%s, %s, %s or ERROR)", r.Verdict, chaos.Valid, chaos.Invalid, chaos.Inconclusive)
	}
	if r.Verdict != want {
		why := "it records no violation, no error and full coverage"
		switch want {
		case "ERROR":
			why = "it records an error"
		case chaos.Invalid:
			why = fmt.Sprintf("it records a violation (%s)", r.First.Kind)
		case chaos.Inconclusive:
			why = "it records a defence or fault it never reached"
		}
		return fmt.Errorf("field \"verdict\" is %s, but %s: its verdict is %s", r.Verdict, why, want)
	}
	return nil
}

// flagsDiffer says how two campaigns' flags differ: "a.json ran --intents
// 20, b.json --intents 30"; or, when their flags agree and only the rest of
// their configuration does not, their hashes.
func flagsDiffer(pa string, a *campaignFile, pb string, b *campaignFile) string {
	split := func(flags string) map[string]string {
		m := map[string]string{}
		for _, part := range strings.Split(" "+flags, " --")[1:] {
			name, value, _ := strings.Cut(part, " ")
			m[name] = value
		}
		return m
	}
	fa, fb := split(a.Flags), split(b.Flags)
	var names []string
	for name := range fa {
		names = append(names, name)
	}
	for name := range fb {
		if _, ok := fa[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var da, db []string
	for _, name := range names {
		if fa[name] != fb[name] {
			if v, ok := fa[name]; ok {
				da = append(da, "--"+name+" "+v)
			} else {
				da = append(da, "no --"+name)
			}
			if v, ok := fb[name]; ok {
				db = append(db, "--"+name+" "+v)
			} else {
				db = append(db, "no --"+name)
			}
		}
	}
	if len(da) == 0 {
		return fmt.Sprintf("config sha256 %.12s… and %.12s…", a.ConfigSHA256, b.ConfigSHA256)
	}
	return fmt.Sprintf("%s ran %s, %s %s", pa, strings.Join(da, " "), pb, strings.Join(db, " "))
}

// mergeOptions are check --merge's flags.
type mergeOptions struct {
	asJSON bool
	junit  string
	recipe string
	shrink bool
	html   string
}

// runMerge combines the shards' result files of one campaign, and reports
// it as the campaign run on one machine would: one table, one JUnit file,
// the first failing seed's recipe (from its shard's file; or, with
// --shrink, shrunk here), and the campaign's exit code.
func runMerge(c *cobra.Command, app *App, paths []string, o mergeOptions) error {
	for _, f := range [][2]string{{"--save-recipe", o.recipe}, {"--junit", o.junit}, {"--html", o.html}} {
		if f[1] != "" {
			if err := checkWritableFlag(f[0], f[1]); err != nil {
				return err
			}
		}
	}
	var files []*campaignFile
	for _, p := range paths {
		f, err := loadCampaign(p)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	run, recipe, err := mergeCampaign(paths, files)
	if err != nil {
		return err
	}
	// A first failing seed over HTTP whose twin in process broke no rule
	// has nothing to shrink: its shard ran the twin already.
	twinPassed := run.first != nil && run.first.Twin != nil && run.first.Twin.Verdict != chaos.Invalid
	shrink := recipe == nil && run.first != nil && !twinPassed && (o.shrink || o.recipe != "")
	if b := files[0].BankSim; shrink && b != version() {
		return usageError("--shrink runs seed %d again, and the shards ran bank-sim %s, not this %s: merge with the bank-sim that ran them", uint64(run.first.Seed), b, version())
	}
	ctx := c.Context()
	out := app.Env.Stdout
	if !o.asJSON {
		all, _ := chaos.ParseSeeds(run.seeds)
		http := chaos.HTTPSeeds(all, run.httpEvery)
		fmt.Fprintf(out, "bank-sim %s · chaos campaign · %s merged from %s (--seeds %s) · %s\n",
			version(), count(len(run.results), "seed", "seeds"), count(run.merged, "shard's file", "shards' files"), run.seeds, campaignPromise(all, http, run.httpEvery, len(all)))
		fmt.Fprintf(out, "%s\n", describeCampaign(run.cfg, run.httpEvery, http))
	}
	var recipeErr error
	switch {
	case recipe != nil:
		run.recipe = recipe
		if o.recipe != "" {
			if err := recipe.Save(o.recipe); err != nil {
				return &ExitError{Code: ExitFailed, Err: fmt.Errorf("write the recipe: %w", err)}
			}
		}
	case shrink:
		// The shard did not shrink it: run the seed again (deterministic,
		// the same history, with the same bank-sim; for a seed over HTTP,
		// its deterministic twin in process) and shrink it here.
		srv, err := app.Server(ctx)
		if err != nil {
			return err
		}
		dbs := banks.OnServer(srv, banks.Options{})
		run.recipe, recipeErr = shrinkFirst(ctx, app, chaosOptions{recipe: o.recipe}, run.cfg, run.first, dbs, !o.asJSON)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	err = reportCampaign(app, campaignReport{asJSON: o.asJSON, junit: o.junit, recipe: o.recipe, html: o.html}, run)
	if recipeErr != nil {
		fmt.Fprintf(app.Env.Stderr, "bank-sim: %v\n", recipeErr)
	}
	return err
}
