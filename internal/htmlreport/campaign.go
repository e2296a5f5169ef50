package htmlreport

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	"github.com/banksim/bank-sim/chaos"
)

// CampaignRun is a chaos campaign as the command knows it: run here (the
// whole, or one shard) or merged from the shards' files.
type CampaignRun struct {
	// Seeds is --seeds as given; Flags the flags that repeat one seed
	// after --deterministic --seed N (or --http --seed N, for a seed that
	// went over HTTP).
	Seeds string
	Flags string
	// Describe is the campaign's configuration in words.
	Describe string
	Results  []chaos.SeedResult
	// Verdict and Union are chaos.Judge's; Judged is false for one shard's
	// run alone, whose coverage is judged when the shards are merged.
	Verdict string
	Union   chaos.Coverage
	Judged  bool
	// Shard is "K/N" for one shard's run; Merged the number of shards'
	// files merged (0 for a run here).
	Shard  string
	Merged int
	First  *chaos.SeedResult
	// FirstNote says, for a first failing seed over HTTP, what its
	// deterministic twin in process showed.
	FirstNote string
	Recipe    *chaos.Recipe
	Elapsed   time.Duration
	// Rates are the campaign's fault rates, to say what a seed missed.
	Rates chaos.Rates
}

// Campaign is the report of a chaos campaign: one row per seed, each
// linking to its details further down; the coverage of the seeds together;
// the first failing seed and its recipe.
func Campaign(r CampaignRun) *Doc {
	tally := chaos.Tally(r.Results)
	var parts []string
	for _, v := range chaos.SortedVerdicts(tally) {
		parts = append(parts, fmt.Sprintf("%d %s", tally[v], v))
	}
	title := fmt.Sprintf("bank-sim chaos campaign · --seeds %s", r.Seeds)
	switch {
	case r.Shard != "":
		title += " · shard " + r.Shard
	case r.Merged > 0:
		title += fmt.Sprintf(" · merged from %d shards' files", r.Merged)
	}
	d := &Doc{Kind: "campaign", Title: title, Subtitle: r.Describe}
	tallyText := strings.Join(parts, ", ") + fmt.Sprintf(" of %d seed(s)", len(r.Results))
	switch {
	case r.Verdict == chaos.Invalid:
		d.Verdict = "INVALID: a seed broke a rule or could not run · " + tallyText
	case !r.Judged:
		d.Verdict = "no seed broke a rule: " + tallyText + " (coverage is judged when the shards' files are merged)"
		d.OK = true
	case r.Verdict == chaos.Inconclusive:
		d.Verdict = "INCONCLUSIVE: no seed broke a rule, but together they never exercised " + fmt.Sprint(len(r.Union.Missing())) + " thing(s): " + tallyText
	default:
		d.Verdict = "VALID: no seed broke a rule, and together they exercised every defence: " + tallyText
		d.OK = true
	}
	d.Style(chaosCSS + campaignCSS)
	if f := r.First; f != nil && f.First != nil {
		d.Section("first-failing", "First failing seed", firstFailingHTML(r, f))
	}
	d.Section("seeds", "Seeds", seedTableHTML(r))
	if r.Judged {
		d.Section("coverage", "Coverage of every seed together", coverageHTML(r.Union))
	}
	d.Section("seed-details", "Each seed", seedDetailsHTML(r))
	return d
}

func firstFailingHTML(r CampaignRun, f *chaos.SeedResult) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, "<p><a href=\"#seed-%d\">Seed %d</a> broke a rule first: %s %s</p>", uint64(f.Seed), uint64(f.Seed), Mark(false, f.First.Kind), Esc(f.First.Detail))
	if f.HTTP {
		fmt.Fprintf(&b, "<p>It went over HTTP, a free run. Repeat its intents and faults (not its interleaving): <code>%s</code></p>", Esc(f.Repeat(r.Flags)))
	} else {
		fmt.Fprintf(&b, "<p>Repeat it: <code>%s</code></p>", Esc(f.Repeat(r.Flags)))
	}
	if r.FirstNote != "" {
		fmt.Fprintf(&b, "<p>%s</p>", Esc(r.FirstNote))
	}
	if h := f.History; h != nil && f.First.Intent >= 0 {
		if lines := chaos.Timeline(h, f.First.Intent); len(lines) > 0 {
			b.WriteString("<h3>The intent involved</h3>")
			b.WriteString(string(Pre(strings.Join(lines, "\n"))))
		}
	}
	if r.Recipe != nil {
		b.WriteString("<h3>Shrunk to a recipe</h3>")
		b.WriteString(string(Pre(r.Recipe.Text())))
	}
	return template.HTML(b.String())
}

func seedTableHTML(r CampaignRun) template.HTML {
	t := Table{ID: "seed-table", Head: []string{"seed", "intents", "faults fired", "unknown outcomes", "verdict", "steps", "history sha256"}}
	for _, s := range r.Results {
		seed := uint64(s.Seed)
		t.RowIDs = append(t.RowIDs, fmt.Sprintf("row-%d", seed))
		steps, hash := Cell{Text: fmt.Sprint(s.Steps), Class: "num"}, Cell{Text: short(s.Hash, 16), Title: s.Hash}
		if s.HTTP {
			// A free run's history does not repeat: nothing to show.
			steps, hash = Cell{Text: "-", Class: "num"}, Cell{Text: "over HTTP (free run)", Title: "a free run over HTTP repeats its intents and faults, not its interleaving"}
		}
		t.Rows = append(t.Rows, []Cell{{Text: fmt.Sprint(seed), Href: fmt.Sprintf("#seed-%d", seed)}, {Text: fmt.Sprint(s.Stats.Intents), Class: "num"},
			{Text: fmt.Sprint(s.Faults), Class: "num"}, {Text: fmt.Sprint(s.Unknowns), Class: "num"}, {HTML: seedVerdict(s)}, steps, hash})
	}
	return Join(Para("Each seed links to its details below."), t.HTML())
}

// seedVerdict is a seed's verdict in a word and a symbol.
func seedVerdict(s chaos.SeedResult) template.HTML {
	switch s.Verdict {
	case chaos.Valid:
		return Mark(true, s.Verdict)
	case chaos.Invalid:
		kind := ""
		if s.First != nil {
			kind = " (" + s.First.Kind + ")"
		}
		return Mark(false, s.Verdict+kind)
	case chaos.Inconclusive:
		return template.HTML(`<span class="mark unk">? INCONCLUSIVE</span>`)
	}
	return Mark(false, s.Verdict)
}

func seedDetailsHTML(r CampaignRun) template.HTML {
	var b strings.Builder
	for _, s := range r.Results {
		seed := uint64(s.Seed)
		fmt.Fprintf(&b, "<div class=\"seed\" id=\"seed-%d\"><h3>seed %d %s</h3><p>", seed, seed, seedVerdict(s))
		if s.Error != "" {
			fmt.Fprintf(&b, "It could not run: %s<br>", Esc(s.Error))
		} else {
			st := s.Stats
			steps := fmt.Sprintf("%d steps", s.Steps)
			if s.HTTP {
				steps = "over HTTP"
			}
			fmt.Fprintf(&b, "%d intents (%d ok, %d rejected) · %d attempts · %d faults fired · %d unknown after the fault phase · %d transfers · %s · %s<br>",
				st.Intents, st.OK, st.Rejected, st.Attempts, s.Faults, s.Unknowns, st.Transfers, steps, Esc(s.Wall.Round(time.Millisecond).String()))
		}
		if v := s.First; v != nil {
			fmt.Fprintf(&b, "First violation: <strong>%s</strong> %s<br>", Esc(v.Kind), Esc(v.Detail))
		}
		if s.Verdict == chaos.Inconclusive {
			missed := s.Missing
			if s.Coverage != nil {
				missed = s.Coverage.Coverage(r.Rates).Unreached()
			}
			fmt.Fprintf(&b, "Not reached by this seed alone: %s<br>", Esc(strings.Join(missed, ", ")))
		}
		if s.HTTP {
			fmt.Fprintf(&b, "A free run over HTTP: <code>%s</code> repeats its intents and faults, not its interleaving (no history hash)</p>", Esc(s.Repeat(r.Flags)))
		} else {
			fmt.Fprintf(&b, "Repeat: <code>%s</code><br>history sha256 <code>%s</code></p>", Esc(s.Repeat(r.Flags)), Esc(s.Hash))
		}
		fmt.Fprintf(&b, "<p class=\"noprint\"><a href=\"#row-%d\">back to its row</a></p></div>\n", seed)
	}
	return template.HTML(b.String())
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

const campaignCSS = `
.seed { border-top: 1px solid var(--line); margin-top: .6rem; }
.seed h3 { margin: .4rem 0 .2rem; font-size: 1rem; }
.seed p { margin: .2rem 0; font-size: .9rem; }
tr:target, .seed:target { background: #fff8c5; }
`
