package htmlreport

import (
	"cmp"
	"fmt"
	"html/template"
	"slices"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
)

// ChaosOptions say what the command knows beyond the history.
type ChaosOptions struct {
	// CheckTitle names a check (a violation kind) in words; nil is
	// chaos.CheckTitle (a run against a target has its own words).
	CheckTitle func(kind string) string
	// Repeat is the command line that repeats the run, when known.
	Repeat string
	// Recipe is the failing run shrunk (--shrink), when it was.
	Recipe *chaos.Recipe
}

// Limits that keep the report of a long run small and quick to open: past
// them the report says how many more there were.
const (
	maxViolationRows = 200 // rows of the violations table
	maxInvolved      = 25  // intents whose whole history is shown
)

// Chaos is the report of one chaos run, or of a saved history checked
// again: the violations first, each with the whole history of the intents
// involved; the run in numbers; a timeline of every attempt (a lane per
// client and per server copy, faults where they struck, the checker's
// verdict); throughput and latency over time with the faults and the
// audit's snapshots; the coverage table; the checks.
func Chaos(h *chaos.History, res chaos.Result, o ChaosOptions) *Doc {
	if o.CheckTitle == nil {
		o.CheckTitle = chaos.CheckTitle
	}
	c := newClock(h)
	verdict := res.Verdict()
	d := &Doc{Kind: "chaos", Title: fmt.Sprintf("bank-sim chaos · seed %d", h.Seed), Subtitle: describeRun(h), OK: verdict == chaos.Valid}
	switch verdict {
	case chaos.Valid:
		d.Verdict = "VALID: no rule broken, and every defence path taken and every fault fired"
	case chaos.Inconclusive:
		d.Verdict = fmt.Sprintf("INCONCLUSIVE: no rule broken, but %d thing(s) never exercised, which this run cannot vouch for", len(res.Coverage.Missing()))
		if n := len(res.Coverage.Unrecognised); n > 0 {
			d.Verdict = fmt.Sprintf("INCONCLUSIVE: no rule broken, but %d thing(s) never exercised or not recognised in the answers (%d), which this run cannot vouch for", len(res.Coverage.Missing()), n)
		}
	default:
		d.Verdict = fmt.Sprintf("INVALID: %d violation(s) of %d rule(s)", len(res.Violations), len(res.ByKind))
	}
	d.Style(chaosCSS)
	involved := involvedIntents(res)
	if len(res.Violations) > 0 {
		d.Section("violations", "Violations", violationsHTML(h, res, c, involved, o))
	}
	if o.Recipe != nil {
		d.Section("recipe", "Shrunk to a recipe", Join(Para("The smallest run found that still breaks the same rule; replay it with 'bank-sim scenario --recipe FILE'."), Pre(o.Recipe.Text())))
	}
	d.Section("run", "The run", runHTML(h, res, c, o))
	d.Section("timeline", "Timeline of every attempt", timelineHTML(h, res, c, involved))
	d.Section("over-time", "Throughput and latency over time", overTimeHTML(h, res, c))
	d.Section("coverage", "Coverage", coverageHTML(res.Coverage))
	d.Section("checks", "Checks", checksHTML(res, o))
	d.Script(timelineJS)
	return d
}

// describeRun is the run's configuration in one line.
func describeRun(h *chaos.History) string {
	cfg := h.Config
	what := fmt.Sprintf("%d intents", len(h.Intents))
	parts := []string{fmt.Sprintf("%d clients", cfg.Clients), what, fmt.Sprintf("%d accounts", cfg.Accounts), fmt.Sprintf("%d server copies", cfg.Instances)}
	switch {
	case cfg.Target != nil:
		parts = append(parts, "against a target")
	case cfg.HTTP:
		parts = append(parts, "over HTTP")
	}
	if h.Deterministic != nil {
		parts = append(parts, "deterministic")
	}
	parts = append(parts, "faults: "+cfg.Faults.String())
	bug := "none (the correct handler)"
	if cfg.Bug != nil {
		bug = cfg.Bug.Name
	}
	parts = append(parts, "bug: "+bug)
	return strings.Join(parts, " · ")
}

// involvedIntents are the intents that violations name, in the order of
// their first violation.
func involvedIntents(res chaos.Result) []int {
	seen := map[int]bool{}
	var out []int
	for _, v := range res.Violations {
		if v.Intent >= 0 && !seen[v.Intent] {
			seen[v.Intent] = true
			out = append(out, v.Intent)
		}
	}
	return out
}

// intentAt finds intent index in h (intents are stored in index order, but
// a history need not be).
func intentAt(h *chaos.History, index int) *chaos.Intent {
	if index >= 0 && index < len(h.Intents) && h.Intents[index].Index == index {
		return &h.Intents[index]
	}
	for i := range h.Intents {
		if h.Intents[i].Index == index {
			return &h.Intents[i]
		}
	}
	return nil
}

func violationsHTML(h *chaos.History, res chaos.Result, c clock, involved []int, o ChaosOptions) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, "<p>%d violation(s)", len(res.Violations))
	var kinds []string
	for _, k := range chaos.Kinds() {
		if n := res.ByKind[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d × %s", n, k))
		}
	}
	fmt.Fprintf(&b, ": %s.", Esc(strings.Join(kinds, ", ")))
	if o.Repeat != "" {
		fmt.Fprintf(&b, " Repeat the run: <code>%s</code>", Esc(o.Repeat))
	}
	b.WriteString("</p>\n")
	t := Table{ID: "violation-list", Head: []string{"#", "rule broken", "seen at", "money involved", "intent", "what happened"}}
	// In the order they could be seen, as a timeline reads; the checker
	// lists them rule by rule.
	inTime := slices.Clone(res.Violations)
	slices.SortStableFunc(inTime, func(a, b chaos.Violation) int { return cmp.Compare(a.AtNs, b.AtNs) })
	for i, v := range inTime {
		if i == maxViolationRows {
			break
		}
		mark := ""
		switch {
		case res.First != nil && *res.First == v && res.Worst != nil && *res.Worst == v:
			mark = " (first, worst)"
		case res.First != nil && *res.First == v:
			mark = " (first)"
		case res.Worst != nil && *res.Worst == v:
			mark = " (worst)"
		}
		intent := Cell{Text: "—"}
		if in := intentAt(h, v.Intent); in != nil {
			intent = Cell{Text: in.Label, Href: fmt.Sprintf("#intent-%d", v.Intent)}
		}
		money := Cell{Text: "—", Class: "num"}
		if v.Kobo != 0 {
			money = Cell{Text: bank.Naira(v.Kobo), Class: "num"}
		}
		t.Rows = append(t.Rows, []Cell{{Text: fmt.Sprintf("%d%s", i+1, mark)}, {HTML: Mark(false, v.Kind), Title: o.CheckTitle(v.Kind)},
			C(c.at(v.AtNs)), money, intent, C(v.Detail)})
	}
	b.WriteString(string(t.HTML()))
	if n := len(res.Violations) - maxViolationRows; n > 0 {
		fmt.Fprintf(&b, "<p class=\"more\">… and %d more violation(s), not listed (counted by rule above).</p>", n)
	}
	if len(involved) == 0 {
		b.WriteString("<p>No single intent is to blame: these rules are about the whole bank (money, keys, side effects).</p>")
		return template.HTML(b.String())
	}
	fmt.Fprintf(&b, "<h3>The intents involved (%d)</h3>\n", len(involved))
	for i, idx := range involved {
		if i == maxInvolved {
			fmt.Fprintf(&b, "<p class=\"more\">… and %d more intents involved; the table above names them.</p>", len(involved)-maxInvolved)
			break
		}
		in := intentAt(h, idx)
		if in == nil {
			continue
		}
		b.WriteString(string(intentHTML(h, in, res, c)))
	}
	return template.HTML(b.String())
}

// intentHTML is one intent's whole history: what it asked, the rules it
// broke, and every attempt.
func intentHTML(h *chaos.History, in *chaos.Intent, res chaos.Result, c clock) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, "<div class=\"intent\" id=\"intent-%d\" data-i=\"%d\">\n", in.Index, in.Index)
	lines := chaos.Timeline(h, in.Index)
	head := in.Label
	if len(lines) > 0 {
		head = lines[0]
	}
	fmt.Fprintf(&b, "<h4>%s</h4>\n<ul class=\"broke\">", Esc(head))
	for _, v := range res.Violations {
		if v.Intent == in.Index {
			fmt.Fprintf(&b, "<li>%s %s</li>", Mark(false, v.Kind), Esc(v.Detail))
		}
	}
	b.WriteString("</ul>\n")
	client := "not recorded"
	if in.Client > 0 {
		client = fmt.Sprintf("client %d", in.Client)
	}
	t := Table{Caption: fmt.Sprintf("sent by %s; outcome: %s", client, in.Outcome),
		Head: []string{"attempt", "phase", "server copy", "started", "took", "fault", "answer", "client saw"}}
	for _, a := range in.Attempts {
		fault := Cell{Text: "none"}
		if a.Fault != "" {
			fault = Cell{HTML: template.HTML("<span class=\"strike-word\">✕ " + Esc(a.Fault) + "</span>")}
		}
		what := a.Error
		if a.Status != 0 {
			what = a.Response().Summary()
		}
		if a.Lookup {
			what = "GET /transfers?key=: " + what
		}
		if a.Key != in.Key {
			what += " (key " + a.Key + ")"
		}
		t.Rows = append(t.Rows, []Cell{{Text: fmt.Sprint(a.N), Class: "num"}, C(a.Phase), C(fmt.Sprint(a.Instance + 1)), C(c.at(a.StartNs)),
			C(c.span(a.EndNs - a.StartNs)), fault, C(what), {HTML: seenMark(a.Seen)}})
	}
	b.WriteString(string(t.HTML()))
	fmt.Fprintf(&b, "<p class=\"noprint\"><a href=\"#timeline\" class=\"show-intent\" data-i=\"%d\">Show it on the timeline</a></p>\n</div>\n", in.Index)
	return template.HTML(b.String())
}

// seenMark says what a client saw, in a symbol and a word.
func seenMark(seen string) template.HTML {
	switch seen {
	case chaos.SeenOK:
		return template.HTML(`<span class="mark ok">✓ ok</span>`)
	case chaos.SeenRejected:
		return template.HTML(`<span class="mark rej">⊘ rejected</span>`)
	}
	return template.HTML(`<span class="mark unk">? unknown</span>`)
}

func runHTML(h *chaos.History, res chaos.Result, c clock, o ChaosOptions) template.HTML {
	s := res.Stats
	rows := [][]Cell{
		{C("intents"), {Text: fmt.Sprint(s.Intents), Class: "num"}, C(fmt.Sprintf("%d ok, %d rejected, %d unknown after the fault phase → %d resolved by healing", s.OK, s.Rejected, s.Healed, s.Resolved))},
		{C("attempts"), {Text: fmt.Sprint(s.Attempts), Class: "num"}, C(fmt.Sprintf("%d replays, %d × 409, %d × 5xx", s.Replays, s.Conflicts, s.ServerErrors))},
	}
	if s.Keyless > 0 {
		rows = append(rows, []Cell{C("without a key"), {Text: fmt.Sprint(s.Keyless), Class: "num"}, C(fmt.Sprintf("%d refused, as they must be", s.KeylessRefused))})
	}
	for k, cause := range s.Causes {
		label := ""
		if k == 0 {
			label = "causes"
		}
		rows = append(rows, []Cell{C(label), {Text: fmt.Sprint(cause.Count), Class: "num"}, C(cause.Cause)})
	}
	rows = append(rows,
		[]Cell{C("transfers"), {Text: fmt.Sprint(s.Transfers), Class: "num"}, C("in the final ledger")},
		[]Cell{C("audits"), {Text: fmt.Sprint(s.Audits), Class: "num"}, C("snapshots of every balance taken while clients ran")},
	)
	fired := 0
	for _, n := range h.Fired {
		fired += n
	}
	rows = append(rows, []Cell{C("faults fired"), {Text: fmt.Sprint(fired), Class: "num"}, C(h.Config.Faults.String())})
	for _, cr := range h.Crashes {
		if line := cr.FailoverLine(); line != "" {
			// The terminal's words: a failover is not a restart, and what
			// it lost comes from the standby it promoted.
			rows = append(rows, []Cell{C("failover"), C("1"), C(line)})
			continue
		}
		what := fmt.Sprintf("killed with SIGKILL at %s, back on the same data at %s", c.at(cr.AtNs), c.at(cr.UpNs))
		if cr.Error != "" {
			what = fmt.Sprintf("killed with SIGKILL at %s; restart failed: %s", c.at(cr.AtNs), cr.Error)
		}
		rows = append(rows, []Cell{C("postgres"), C("1"), C(what)})
	}
	if fc := h.FailoverCommand; fc != nil {
		rows = append(rows, []Cell{C("failover-cmd"), C("1"), {HTML: template.HTML(Esc(fc.Line()) + "<pre>" + Esc(fc.Output) + "</pre>")}})
	}
	for _, pc := range res.PrimaryChanges {
		rows = append(rows, []Cell{C("primary changed"), C(fmt.Sprint(len(pc.Crossing))), C(pc.Line())})
	}
	switch {
	case h.Deterministic != nil:
		hash, _ := h.Hash()
		rows = append(rows, []Cell{C("scheduler steps"), {Text: fmt.Sprint(h.Deterministic.Steps), Class: "num"}, C("history sha256 " + hash + " (the same seed and flags give the same)")})
	case s.Duration > 0:
		rows = append(rows, []Cell{C("duration"), C(s.Duration.Round(1e6).String()), C(fmt.Sprintf("%.0f intents/s", s.IntentsPerSecond))})
	}
	for i, st := range h.Stalls {
		if i == 5 {
			rows = append(rows, []Cell{C("stalled"), C(""), C(fmt.Sprintf("… and %d more staged races that did not happen", len(h.Stalls)-5))})
			break
		}
		rows = append(rows, []Cell{C("stalled"), C(""), C(st)})
	}
	var b strings.Builder
	b.WriteString(string(Table{ID: "run-stats", Head: []string{"", "count", ""}, Rows: rows}.HTML()))
	if o.Repeat != "" {
		fmt.Fprintf(&b, "<p>Repeat it: <code>%s</code></p>", Esc(o.Repeat))
	}
	return template.HTML(b.String())
}

// coverageHTML is the coverage table: a row per defence path, then a row
// per fault kind, each said in a word and a symbol.
func coverageHTML(cov chaos.Coverage) template.HTML {
	t := Table{ID: "coverage-table", Head: []string{"", "name", "count", "state", "what it is · what reaches it"}}
	for _, p := range cov.Paths {
		state, what := Mark(true, "taken"), p.What
		if p.Count == 0 {
			state, what = Mark(false, "NOT REACHED"), "reached by: "+p.ReachedBy
		}
		t.Rows = append(t.Rows, []Cell{C("defence path"), C(p.Path), {Text: fmt.Sprint(p.Count), Class: "num"}, {HTML: state}, C(what)})
	}
	for _, f := range cov.Faults {
		var state template.HTML
		count := fmt.Sprint(f.Fired)
		switch {
		case f.Rate > 0 && f.Fired == 0:
			state = Mark(false, "NEVER FIRED")
		case f.Rate > 0:
			state = Mark(true, "fired")
		default:
			state, count = template.HTML(`<span class="mark off">– off</span>`), "-"
		}
		t.Rows = append(t.Rows, []Cell{C("fault"), C(f.Kind), {Text: count, Class: "num"}, {HTML: state}, C(fmt.Sprintf("rate %g per attempt", f.Rate))})
	}
	var b strings.Builder
	b.WriteString(string(t.HTML()))
	if m := cov.Missing(); len(m) > 0 {
		b.WriteString("<p>Never exercised, so this run cannot vouch for it:</p><ul id=\"missing\">")
		for _, s := range m {
			fmt.Fprintf(&b, "<li>%s</li>", Esc(s))
		}
		b.WriteString("</ul>")
	}
	return template.HTML(b.String())
}

func checksHTML(res chaos.Result, o ChaosOptions) template.HTML {
	var b strings.Builder
	b.WriteString("<ul class=\"checks\">")
	for _, ch := range res.Checks {
		if ch.Violations == 0 {
			fmt.Fprintf(&b, "<li>%s</li>", Mark(true, o.CheckTitle(ch.Kind)))
		} else {
			fmt.Fprintf(&b, "<li>%s: %d violation(s)</li>", Mark(false, o.CheckTitle(ch.Kind)), ch.Violations)
		}
	}
	b.WriteString("</ul>")
	if len(res.Unchecked) > 0 {
		b.WriteString("<p>Not checked (the target does not expose what they need):</p><ul>")
		for _, u := range res.Unchecked {
			fmt.Fprintf(&b, "<li>%s: %s</li>", Esc(o.CheckTitle(u.Kind)), Esc(u.Why))
		}
		b.WriteString("</ul>")
	}
	return template.HTML(b.String())
}

const chaosCSS = `
.mark.rej { color: var(--muted); }
.mark.unk { color: var(--warn); }
.mark.off { color: var(--muted); }
.strike-word { color: var(--bad); font-weight: 600; }
.intent { border-left: 4px solid var(--bad); padding: .1rem .8rem; margin: 1rem 0; }
.intent h4 { margin: .3rem 0; font-family: ui-monospace, monospace; font-size: .9rem; }
ul.broke { margin: .2rem 0; padding-left: 1.2rem; }
ul.checks { list-style: none; padding-left: 0; }
.more { color: var(--muted); font-style: italic; }
.legend { font-size: .85rem; color: var(--muted); }
.legend svg { vertical-align: middle; }
.tl-wrap { overflow-x: auto; }
svg.timeline .lane-bg { fill: var(--soft); }
svg.timeline .lane-label, svg.plot .tick, svg.timeline .tick { font-size: 10px; fill: var(--muted); }
svg .axis { stroke: var(--ink); stroke-width: 1; }
svg .grid { stroke: var(--line); stroke-width: .5; }
svg .axis-label { font-size: 11px; font-weight: 600; }
svg .group-label { font-size: 11px; font-weight: 700; }
svg .attempt, svg .hit { stroke: #000; stroke-width: .4; }
svg .ok { fill: #2e7d32; }
svg .rej { fill: #9e9e9e; }
svg .unk { fill: #fff; }
svg .attempt.fault, svg .hit.fault { stroke: var(--bad); stroke-width: 1; stroke-dasharray: 2 1; }
svg .viol { stroke: var(--bad); stroke-width: 1.6; }
svg .strike { fill: var(--bad); }
svg .audit { stroke: #1565c0; stroke-width: 1; stroke-dasharray: 3 2; }
svg .crash { stroke: #000; stroke-width: 2; }
svg .failover { fill: #000; fill-opacity: .1; stroke: #000; stroke-dasharray: 4 2; }
svg .phase { stroke: var(--muted); stroke-width: 1; stroke-dasharray: 1 2; }
svg .vmark { fill: var(--bad); font-size: 11px; font-weight: 700; }
svg .sel { stroke: #ff6f00; stroke-width: 2.5; }
svg .bar { fill: #546e7a; }
svg .faultbar { fill: var(--bad); }
svg .line-p50 { stroke: #1a237e; stroke-width: 1.6; fill: none; }
svg .line-p99 { stroke: var(--bad); stroke-width: 1.6; fill: none; stroke-dasharray: 5 3; }
svg .line-att { stroke: #000; stroke-width: 1.2; fill: none; stroke-dasharray: 2 2; }
#tl-info { min-height: 1.5em; font-family: ui-monospace, monospace; font-size: .85rem; }
/* What lies below the first screen is laid out when it is scrolled to: a
   long run's report opens at once. */
#over-time, #coverage, #checks { content-visibility: auto; contain-intrinsic-size: auto 900px; }
@media print { .tl-wrap { overflow: visible; } }
`
