package cmd_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/pgtest"
)

// sharedServer is the PostgreSQL server (a cluster of the usual cache,
// reused) that the tests' commands share through --database-url: started by
// the first test that asks, stopped when the tests end (closeBrowser.Run).
// Each command clones a bank of its own on it, so the tests stay apart; one
// server for the package saves a cluster's start per test (four tests).
func sharedServer(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		shared.srv, shared.err = postgres.Start(context.Background(), postgres.Options{})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv.AdminURL()
}

var shared struct {
	once sync.Once
	srv  *postgres.Server
	err  error
}

// closeSharedServer stops sharedServer's server, if a test started it.
func closeSharedServer() {
	if shared.srv != nil {
		shared.srv.Close()
	}
}

// campaignTable is a campaign's report without its times: the table, the
// tally, what no seed reached, the first failing seed.
func campaignTable(stdout string) string {
	i := strings.Index(stdout, "\nseed ")
	if i < 0 {
		return ""
	}
	var keep []string
	for _, line := range strings.Split(stdout[i+1:], "\n") {
		if strings.Contains(line, "written to") {
			continue
		}
		keep = append(keep, regexp.MustCompile(` · [0-9.]+(ms|s|m[0-9.]*s)$`).ReplaceAllString(line, ""))
	}
	return strings.Join(keep, "\n")
}

type junitDoc struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Skipped  int `xml:"skipped,attr"`
	Cases    []struct {
		Name    string `xml:"name,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
		} `xml:"failure"`
		Skipped *struct {
			Message string `xml:"message,attr"`
		} `xml:"skipped"`
	} `xml:"testsuite>testcase"`
}

func readJUnit(t *testing.T, path string) junitDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d junitDoc
	if err := xml.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// A campaign run in shards, one machine each, and merged is the campaign
// run on one machine: the same table (each seed's verdict and what it did
// not reach, in the order of --seeds), the same coverage judged over every
// seed, the same JUnit cases, the same exit code. The merge needs no
// database. Files that are not one campaign's shards are refused (exit 2),
// each with what was wrong.
func TestShardsMergedEqualTheWholeCampaign(t *testing.T) {
	t.Parallel()
	start := time.Now()
	url := sharedServer(t)
	t.Logf("PostgreSQL started in %s", time.Since(start))
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	flags := []string{"chaos", "--seeds", "4,1", "--intents", "6", "--clients", "2", "--database-url", url, "--no-color"}
	var whole, s1, s2 result
	var wg sync.WaitGroup
	for _, c := range []struct {
		r    *result
		args []string
	}{
		{&whole, []string{"--campaign-out", at("whole.json"), "--junit", at("whole.xml")}},
		{&s1, []string{"--shard", "1/2", "--campaign-out", at("s1.json")}},
		{&s2, []string{"--shard", "2/2", "--campaign-out", at("s2.json")}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*c.r = run(t, context.Background(), postgres.Start, append(slices.Clone(flags), c.args...)...)
		}()
	}
	wg.Wait()
	t.Logf("the campaign and its two shards ran in %s", time.Since(start))
	if whole.code != cmd.ExitInconclusive || !strings.Contains(whole.stdout, "INCONCLUSIVE coverage: no seed exercised:") {
		t.Fatalf("2 seeds of 6 intents: exit %d, want %d, naming what no seed reached; stdout:\n%s\nstderr: %s", whole.code, cmd.ExitInconclusive, whole.stdout, whole.stderr)
	}
	for _, s := range []result{s1, s2} {
		// A shard leaves coverage to the merge: it broke no rule.
		if s.code != cmd.ExitOK || !strings.Contains(s.stdout, "coverage: judged over every shard's seeds together") {
			t.Fatalf("a shard: exit %d, want %d; stdout:\n%s\nstderr: %s", s.code, cmd.ExitOK, s.stdout, s.stderr)
		}
	}
	if !regexp.MustCompile(`(?m)^bank-sim \S+ · chaos campaign · shard 1/2: 1 of 2 seeds · `).MatchString(s1.stdout) {
		t.Errorf("shard 1/2's banner should say its share:\n%s", s1.stdout)
	}

	merged := run(t, context.Background(), mustNotStart(t), "check", "--merge", at("s2.json"), at("s1.json"), "--junit", at("merged.xml"), "--no-color")
	if merged.code != whole.code {
		t.Errorf("merged: exit %d, the whole campaign %d; stderr: %s", merged.code, whole.code, merged.stderr)
	}
	if got, want := campaignTable(merged.stdout), campaignTable(whole.stdout); got != want || want == "" {
		t.Errorf("the merged table differs from the whole campaign's:\n--- merged\n%s\n--- whole\n%s", got, want)
	}
	if !regexp.MustCompile(`(?m)^4 +6 +\d+ +\d+ +INCONCLUSIVE \(not reached: [a-z0-9-]+, `).MatchString(merged.stdout) {
		t.Errorf("the merged table should start with seed 4 and name what it did not reach:\n%s", merged.stdout)
	}
	w, m := readJUnit(t, at("whole.xml")), readJUnit(t, at("merged.xml"))
	if w.Tests != 3 || w.Skipped != 2 || w.Failures != 1 || m.Tests != w.Tests || m.Skipped != w.Skipped || m.Failures != w.Failures || len(m.Cases) != len(w.Cases) {
		t.Fatalf("JUnit: whole %d tests, %d skipped, %d failures; merged %d, %d, %d; want 3 (2 seeds and the coverage), 2 skipped, 1 failure each",
			w.Tests, w.Skipped, w.Failures, m.Tests, m.Skipped, m.Failures)
	}
	for i, c := range w.Cases {
		mc := m.Cases[i]
		if c.Name != mc.Name || (c.Skipped == nil) != (mc.Skipped == nil) || (c.Failure == nil) != (mc.Failure == nil) ||
			c.Skipped != nil && c.Skipped.Message != mc.Skipped.Message || c.Failure != nil && c.Failure.Message != mc.Failure.Message {
			t.Errorf("JUnit case %d: whole %+v, merged %+v", i, c, mc)
		}
	}
	if c := w.Cases[0]; c.Name != "seed 4" || c.Skipped == nil || !strings.Contains(c.Skipped.Message, "not reached: ") {
		t.Errorf("an INCONCLUSIVE seed is skipped with what it did not reach: %+v", c)
	}
	if c := w.Cases[2]; c.Name != "coverage of every seed" || c.Failure == nil || !strings.HasPrefix(c.Failure.Message, "INCONCLUSIVE: no seed exercised ") {
		t.Errorf("the campaign's coverage case should fail, naming what no seed reached: %+v", c)
	}
	// The whole campaign's own file is a campaign of one shard.
	if r := run(t, context.Background(), mustNotStart(t), "check", "--merge", at("whole.json"), "--no-color"); r.code != whole.code || campaignTable(r.stdout) != campaignTable(whole.stdout) {
		t.Errorf("the whole campaign's file merged alone: exit %d; stdout:\n%s", r.code, r.stdout)
	}

	// What is not one campaign's shards, each refused with what was wrong.
	edit := func(name string, change func(map[string]any)) string {
		data, err := os.ReadFile(at("s2.json"))
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		change(f)
		data, _ = json.Marshal(f)
		if err := os.WriteFile(at(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return at(name)
	}
	other := edit("other.json", func(f map[string]any) {
		f["flags"] = strings.Replace(f["flags"].(string), "--intents 6", "--intents 30", 1)
		f["configSha256"] = "0000"
	})
	short := edit("short.json", func(f map[string]any) { f["results"] = []any{} })
	build := edit("build.json", func(f map[string]any) { f["bankSim"] = "v0.0.1-other" })
	os.WriteFile(at("notjson.json"), []byte("seed,verdict\n4,VALID\n"), 0o644)
	big, err := os.Create(at("big.json"))
	if err != nil {
		t.Fatal(err)
	}
	big.Truncate(65 << 20) // sparse: no disk
	big.Close()
	for _, c := range []struct {
		name  string
		files []string
		want  string
	}{
		{"a shard missing", []string{at("s1.json")}, "shard 2/2 missing: give every shard's file"},
		{"a shard twice", []string{at("s1.json"), at("s2.json"), at("s1.json")}, "are both shard 1/2: their seeds overlap"},
		{"other flags", []string{at("s1.json"), other}, "ran different campaigns (" + at("s1.json") + " ran --intents 6, " + other + " --intents 30)"},
		{"a whole campaign and a shard", []string{at("s1.json"), at("whole.json")}, "is shard 1/2, " + at("whole.json") + " shard 1/1"},
		{"a shard's file cut short", []string{at("s1.json"), short}, "shard 2/2 of --seeds 4,1 runs 1 seed, but the file holds 0 seeds"},
		{"another build", []string{at("s1.json"), build}, "was written by bank-sim v0.0.1-other"},
		{"not JSON", []string{at("notjson.json")}, "is not a campaign's result file: it is not JSON"},
		{"over 64 MiB", []string{big.Name()}, "is over 64 MiB: not a campaign's result file"},
	} {
		r := run(t, context.Background(), mustNotStart(t), append([]string{"check", "--merge"}, c.files...)...)
		if r.code != cmd.ExitUsage || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 || r.stdout != "" {
			t.Errorf("%s: exit %d, want %d with %q; stdout %q, stderr %q", c.name, r.code, cmd.ExitUsage, c.want, r.stdout, r.stderr)
		}
	}
}

// A campaign on the correct handler where two seeds each miss on their own
// a path another takes: at 200 intents seed 555's workload never draws a
// transfer to a missing recipient (the short-run guarantee places faults,
// not the workload's own refusals), which seeds 554 and 556 do; seed 556's
// dispatchers never lose a claim (a pause and a clock jump on one row, drawn
// by the side effects' pipeline), which 554 and 555's do. The campaign exits
// 0; each of the two lines names what it missed; JUnit skips both.
func TestCampaignOfTheCorrectHandlerIsValidTogether(t *testing.T) {
	pgtest.Exhaustive(t)
	xmlPath := filepath.Join(t.TempDir(), "c.xml")
	r := run(t, context.Background(), postgres.Start, "chaos", "--seeds", "554-556", "--intents", "200", "--junit", xmlPath, "--no-color")
	if r.code != cmd.ExitOK {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr: %s", r.code, cmd.ExitOK, r.stdout, r.stderr)
	}
	if !regexp.MustCompile(`(?m)^555 +200 .*INCONCLUSIVE \(not reached: refused-missing-recipient\)`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^556 +200 .*INCONCLUSIVE \(not reached: outbox-lost-claim\)`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^554 +200 .* VALID `).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, "coverage: the seeds together took every defence path and fired every fault (2 seeds on their own missed some)") {
		t.Errorf("seeds 555 and 556's lines should name what each did not reach, and the campaign say the seeds together reached everything:\n%s", r.stdout)
	}
	d := readJUnit(t, xmlPath)
	if d.Failures != 0 || d.Skipped != 2 || d.Tests != 4 {
		t.Errorf("JUnit: %d tests, %d failures, %d skipped; want 4 (3 seeds and the coverage), 0, 2", d.Tests, d.Failures, d.Skipped)
	}
}

// Issue 29, item 9, and issue 30, kind 5: check --merge believes nothing a
// shard's file says that its own record denies. A failing campaign (every
// seed INVALID) merges to exit 1 with the table and JUnit agreeing; the
// same files with their verdicts lower-cased, emptied, made "PASS", or
// VALID beside the violation they record, or with a config that is not
// the one their hash was taken of, are refused (exit 2) naming the file
// and the field, never merged to exit 0; and a second, different file
// claiming a shard is refused even when there are more files than shards.
func TestMergeRefusesShardsThatTheirOwnEvidenceDenies(t *testing.T) {
	t.Parallel()
	url := sharedServer(t)
	dir := t.TempDir()
	at := func(name string) string { return filepath.Join(dir, name) }
	// Seeds 1 and 3 at 10 intents both break a rule with this mistake
	// (seed 2 needs 15), and each shard then shrinks its seed: a shorter
	// run is a shorter shrink (at 40 intents this test took 22-51 s in the
	// default suite).
	flags := []string{"chaos", "--seeds", "1,3", "--bug", "new-key-per-attempt", "--intents", "10", "--clients", "2", "--database-url", url, "--no-color"}
	var wg sync.WaitGroup
	shards := make([]result, 2)
	for k := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			shards[k] = run(t, context.Background(), postgres.Start, append(slices.Clone(flags), "--shard", fmt.Sprintf("%d/2", k+1), "--campaign-out", at(fmt.Sprintf("s%d.json", k+1)))...)
		}()
	}
	wg.Wait()
	for k, s := range shards {
		if s.code != cmd.ExitFailed {
			t.Fatalf("shard %d/2 of a campaign with --bug new-key-per-attempt: exit %d, want %d\n%s\n%s", k+1, s.code, cmd.ExitFailed, s.stdout, s.stderr)
		}
	}
	merged := run(t, context.Background(), mustNotStart(t), "check", "--merge", at("s1.json"), at("s2.json"), "--junit", at("m.xml"), "--no-color")
	if merged.code != cmd.ExitFailed || len(regexp.MustCompile(`(?m)^\d+ .* INVALID \(`).FindAllString(campaignTable(merged.stdout), -1)) != 2 {
		t.Fatalf("the failing campaign merged: exit %d, want %d, and 2 INVALID seeds in the table:\n%s\n%s", merged.code, cmd.ExitFailed, merged.stdout, merged.stderr)
	}
	if j := readJUnit(t, at("m.xml")); j.Failures < 2 {
		t.Errorf("JUnit: %d failures, the table 2 INVALID seeds", j.Failures)
	}

	// edit writes a copy of shard k's file, changed.
	edit := func(k int, name string, change func(f map[string]any)) string {
		data, err := os.ReadFile(at(fmt.Sprintf("s%d.json", k)))
		if err != nil {
			t.Fatal(err)
		}
		var f map[string]any
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		change(f)
		data, _ = json.Marshal(f)
		if err := os.WriteFile(at(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return at(name)
	}
	verdicts := func(to func(string) string) func(map[string]any) {
		return func(f map[string]any) {
			for _, r := range f["results"].([]any) {
				r := r.(map[string]any)
				r["verdict"] = to(r["verdict"].(string))
			}
		}
	}
	for _, c := range []struct {
		name  string
		files []string
		want  string
	}{
		{"lower-cased verdicts", []string{edit(1, "l1.json", verdicts(strings.ToLower)), edit(2, "l2.json", verdicts(strings.ToLower))},
			at("l1.json") + `: seed 1: field "verdict" is "invalid", not a verdict bank-sim writes`},
		{"an empty verdict", []string{at("s1.json"), edit(2, "e2.json", verdicts(func(string) string { return "" }))},
			at("e2.json") + `: seed 3: field "verdict" is "", not a verdict bank-sim writes`},
		{"PASS", []string{at("s1.json"), edit(2, "p2.json", verdicts(func(string) string { return "PASS" }))},
			`field "verdict" is "PASS", not a verdict bank-sim writes`},
		{"VALID beside a violation", []string{edit(1, "v1.json", verdicts(func(string) string { return "VALID" })), at("s2.json")},
			at("v1.json") + `: seed 1: field "verdict" is VALID, but it records a violation (`},
		{"a config its hash was not taken of", []string{at("s1.json"), edit(2, "c2.json", func(f map[string]any) { f["config"].(map[string]any)["auditSteps"] = 12345 })}, // not among the flags: only the hash tells
			at("c2.json") + ": its configSha256 is not the hash of its config"},
		{"two different files claiming one shard, more files than shards", []string{at("s1.json"), at("s2.json"), edit(1, "d1.json", func(f map[string]any) { f["durationNs"] = 1 })},
			"are both shard 1/2: their seeds overlap"},
	} {
		r := run(t, context.Background(), mustNotStart(t), append([]string{"check", "--merge", "--no-color"}, c.files...)...)
		if r.code != cmd.ExitUsage || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
			t.Errorf("%s: exit %d, want %d with %q; stdout %q, stderr %q", c.name, r.code, cmd.ExitUsage, c.want, r.stdout, r.stderr)
		}
	}
}
