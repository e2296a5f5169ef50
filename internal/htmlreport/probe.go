package htmlreport

import (
	"fmt"
	"html/template"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/banksim/bank-sim/probe"
)

// ProbeWarning is one distinct warning of a probe run, said once, and every
// place it was seen.
type ProbeWarning struct {
	// Text is what the sightings share: the warning's explanation.
	Text string
	Seen []ProbeSighting
}

// ProbeSighting is one place a warning was given: the check, and what
// there was particular to it (which answer, which bytes).
type ProbeSighting struct {
	Check, Detail string
}

// Headline is what the sightings' particulars have in common (the words
// of their longest common run, e.g. "… is not the first answer byte for
// byte: …"), or the one sighting's particulars.
func (w ProbeWarning) Headline() string {
	if len(w.Seen) == 0 {
		return w.Text
	}
	common := strings.Fields(w.Seen[0].Detail)
	if len(w.Seen) == 1 {
		return w.Seen[0].Detail
	}
	for _, s := range w.Seen[1:] {
		common = commonRun(common, strings.Fields(s.Detail))
	}
	if len(common) < 4 {
		return w.Seen[0].Detail
	}
	return "… " + strings.Join(common, " ") + " …"
}

// commonRun is the longest run of words that a and b share.
func commonRun(a, b []string) []string {
	best, end := 0, 0
	prev := make([]int, len(b)+1)
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		for j := 1; j <= len(b); j++ {
			if a[i-1] == b[j-1] {
				cur[j] = prev[j-1] + 1
				if cur[j] > best {
					best, end = cur[j], i
				}
			}
		}
		prev = cur
	}
	return a[end-best : end]
}

// splitWarning splits a warning's evidence line ("⚠ the retry … is not the
// first answer byte for byte: …. Harmless to a JSON client, …") into what
// is particular to this sighting and the explanation every sighting shares:
// the first sentence, and the rest. A one-sentence warning is its own
// explanation, its numbers aside.
func splitWarning(line string) (detail, shared, key string) {
	s := strings.TrimSpace(strings.TrimPrefix(line, "⚠"))
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '.' && s[i+1] == ' ' {
			r, _ := utf8.DecodeRuneInString(s[i+2:])
			if unicode.IsUpper(r) {
				return s[:i], s[i+2:], s[i+2:]
			}
		}
	}
	return s, s, digits.ReplaceAllString(s, "#")
}

var digits = regexp.MustCompile(`[0-9][0-9.,]*`)

func isWarning(line string) bool { return strings.HasPrefix(line, "⚠") }

// ProbeWarnings gathers the warnings of rep's checks: each distinct one once,
// in the order first seen.
func ProbeWarnings(rep *probe.Report) []ProbeWarning {
	var out []ProbeWarning
	index := map[string]int{}
	for _, c := range rep.Checks {
		for _, e := range c.Evidence {
			if !isWarning(e) {
				continue
			}
			detail, shared, key := splitWarning(e)
			i, ok := index[key]
			if !ok {
				i = len(out)
				index[key] = i
				out = append(out, ProbeWarning{Text: shared})
			}
			out[i].Seen = append(out[i].Seen, ProbeSighting{Check: c.Name, Detail: detail})
		}
	}
	return out
}

// warningOf returns the number (from 1) of the warning an evidence line
// belongs to.
func warningOf(ws []ProbeWarning, line string) int {
	_, shared, key := splitWarning(line)
	for i, w := range ws {
		if w.Text == shared || digits.ReplaceAllString(w.Text, "#") == key {
			return i + 1
		}
	}
	return 0
}

var statusLook = map[probe.Status]struct{ sym, class string }{
	probe.Pass:    {"✓", "ok"},
	probe.Fail:    {"✗", "bad"},
	probe.Unknown: {"?", "warn"},
	probe.Skipped: {"–", "warn"},
}

func statusMark(s probe.Status) template.HTML {
	l := statusLook[s]
	return template.HTML(fmt.Sprintf(`<span class="mark %s">%s %s</span>`, l.class, l.sym, Esc(string(s))))
}

// statusRank orders the checks for a reader: what failed first, then what
// could not be made, then the passes.
var statusRank = map[probe.Status]int{probe.Fail: 0, probe.Unknown: 1, probe.Skipped: 2, probe.Pass: 3}

// hangUpRound is one round of the hang-up check, from its evidence line.
type hangUpRound struct {
	N int
	// Kind: "answered" (the answer beat the hang-up and was dropped),
	// "hung-up" (before any answer; the retry was replayed at once) or
	// "waited" (before any answer; the retry was told 409 first).
	Kind          string
	Moment        string
	What, Retried string
	Line          string
}

var (
	roundLine   = regexp.MustCompile(`^round (\d+): (.*)$`)
	roundMoment = regexp.MustCompile(`hung up (\S+) after`)
)

// parseRound reads a hang-up round's evidence line.
func parseRound(line string) (hangUpRound, bool) {
	m := roundLine.FindStringSubmatch(line)
	if m == nil {
		return hangUpRound{}, false
	}
	r := hangUpRound{Line: line}
	fmt.Sscan(m[1], &r.N)
	r.What, r.Retried, _ = strings.Cut(m[2], " · retried: ")
	switch {
	case strings.Contains(r.What, "hung up") && strings.Contains(r.Retried, "409"):
		r.Kind = "waited"
	case strings.Contains(r.What, "hung up"):
		r.Kind = "hung-up"
	default:
		r.Kind = "answered"
	}
	if mm := roundMoment.FindStringSubmatch(r.What); mm != nil {
		r.Moment = mm[1]
	}
	return r, true
}

var roundLook = map[string]struct{ sym, words string }{
	"answered": {"●", "answered before the hang-up (the answer was dropped); the retry was replayed"},
	"hung-up":  {"○", "hung up before any answer; the retry was replayed at once"},
	"waited":   {"◐", "hung up before any answer; the retry was told 409 (in progress) first, then replayed"},
}

const probeCSS = `
table.summary td.status { white-space: nowrap; }
table.summary tr.failed th, table.summary tr.failed td { border-left: 0; background: #fde8e8; }
table.summary tr.failed th::before { content: "▶ "; color: var(--bad); }
article.check { border: 1px solid var(--line); border-left: 6px solid var(--line); padding: .2rem .9rem .6rem; margin: .8rem 0; }
article.check[data-status="FAIL"] { border-left-color: var(--bad); }
article.check[data-status="PASS"] { border-left-color: var(--ok); }
article.check[data-status="UNKNOWN"], article.check[data-status="SKIPPED"] { border-left-color: var(--warn); }
article.check h3 small { font-weight: 400; color: var(--muted); }
ol.evidence { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: .8rem; padding-left: 2.2rem; }
ol.evidence li { margin: .1rem 0; overflow-wrap: anywhere; }
ol.evidence li.ok { color: var(--ok); }
ol.evidence li.bad { color: var(--bad); font-weight: 700; }
ol.evidence li.warn { color: var(--warn); }
.strip { display: flex; flex-wrap: wrap; gap: 2px; margin: .4rem 0; font-size: 1.1rem; line-height: 1; }
.strip span { display: inline-block; width: 1.35rem; text-align: center; border: 1px solid var(--line); padding: .15rem 0; }
.strip span.waited { background: #fff4d6; }
.strip span.answered { background: #e8eef8; }
.warning { border: 1px solid var(--warn); border-left: 6px solid var(--warn); padding: .3rem .8rem; margin: .6rem 0; }
.warning p.text { margin: .2rem 0; }
table.rounds td { font-size: .8rem; }
table#target-table thead { display: none; }
table#target-table td.key { font-weight: 700; white-space: nowrap; }
table.summary th { white-space: nowrap; }
@media print { article.check { break-inside: avoid-page; } }
`

// printAll opens the folded evidence for printing, and folds it again
// after: on paper there is no click.
const printAll = `
var folded = [];
window.addEventListener('beforeprint', function () {
  folded = Array.from(document.querySelectorAll('details:not([open])'));
  folded.forEach(function (d) { d.open = true; });
});
window.addEventListener('afterprint', function () {
  folded.forEach(function (d) { d.open = false; });
  folded = [];
});
`

// longEvidence is how many evidence lines a check shows before they are
// folded away (a failed check's stay open).
const longEvidence = 6

// Probe renders a probe run: a summary of every check (failures first), the
// warnings each said once with the checks they apply to, then each check
// with its evidence, long evidence folded and the hang-up rounds as a strip.
func Probe(rep *probe.Report) *Doc {
	d := &Doc{Kind: "probe", Title: "probe " + strings.Join(rep.Target, ", "),
		Subtitle: fmt.Sprintf("seed %d (repeat with --seed %d) · %s · %s", rep.Seed, rep.Seed,
			rep.Started.Format("2006-01-02 15:04:05 MST"), time.Duration(rep.Duration).Round(time.Millisecond)),
		Verdict: rep.Verdict, OK: rep.Failed == 0}
	d.Style(probeCSS)
	d.Script(printAll)
	checks := append([]probe.Result(nil), rep.Checks...)
	sort.SliceStable(checks, func(a, b int) bool { return statusRank[checks[a].Status] < statusRank[checks[b].Status] })
	warnings := ProbeWarnings(rep)

	var s strings.Builder
	fmt.Fprintf(&s, "<p>%d passed · %d failed · %d could not be made</p>", rep.Passed, rep.Failed, rep.NotMade)
	s.WriteString(`<table class="summary" id="summary"><thead><tr>`)
	for _, h := range []string{"check", "verdict", "what it tells", "why, or what the pass proves"} {
		fmt.Fprintf(&s, `<th scope="col">%s</th>`, Esc(h))
	}
	s.WriteString("</tr></thead><tbody>\n")
	for _, c := range checks {
		cls := ""
		if c.Status == probe.Fail {
			cls = ` class="failed"`
		}
		why := c.Reason
		if c.Status == probe.Pass {
			why = c.Proves
		}
		fmt.Fprintf(&s, `<tr%s data-check="%s" data-status="%s"><th scope="row"><a href="#check-%s">%s</a></th><td class="status">%s</td><td>%s</td><td>%s</td></tr>`+"\n",
			cls, Esc(c.Name), Esc(string(c.Status)), Esc(c.Name), Esc(c.Name), statusMark(c.Status), Esc(c.Title), Esc(why))
	}
	s.WriteString("</tbody></table>")
	d.Section("checks-summary", "Checks", template.HTML(s.String()))

	if len(warnings) > 0 {
		var w strings.Builder
		fmt.Fprintf(&w, "<p>%d distinct warning(s); each is said once here, and linked from the evidence where it was seen. A warning does not fail a check.</p>", len(warnings))
		for i, x := range warnings {
			var where []string
			count := map[string]int{}
			for _, s := range x.Seen {
				if count[s.Check] == 0 {
					where = append(where, s.Check)
				}
				count[s.Check]++
			}
			links := make([]string, len(where))
			for j, c := range where {
				links[j] = fmt.Sprintf(`<a href="#check-%s">%s</a>`, Esc(c), Esc(c))
				if count[c] > 1 {
					links[j] += fmt.Sprintf(" (×%d)", count[c])
				}
			}
			fmt.Fprintf(&w, `<div class="warning" id="warning-%d"><p class="text"><strong>⚠ warning %d</strong> · seen %d time(s) in %s</p>`,
				i+1, i+1, len(x.Seen), strings.Join(links, ", "))
			if h := x.Headline(); h != x.Text {
				fmt.Fprintf(&w, `<p class="text headline"><strong>%s</strong></p>`, Esc(h))
			}
			fmt.Fprintf(&w, `<p class="text">%s</p>`, Esc(x.Text))
			w.WriteString(`<details><summary>where, and what was particular each time</summary><ul>`)
			for _, s := range x.Seen {
				fmt.Fprintf(&w, "<li><strong>%s</strong>: %s</li>", Esc(s.Check), Esc(s.Detail))
			}
			w.WriteString("</ul></details></div>")
		}
		d.Section("warnings", "Warnings", template.HTML(w.String()))
	}

	var e strings.Builder
	for _, c := range checks {
		fmt.Fprintf(&e, `<article class="check" id="check-%s" data-status="%s"><h3>%s %s <small>— %s</small></h3>`,
			Esc(c.Name), Esc(string(c.Status)), statusMark(c.Status), Esc(c.Name), Esc(c.Title))
		switch c.Status {
		case probe.Pass:
			fmt.Fprintf(&e, `<p class="proves"><strong>proves:</strong> %s</p>`, Esc(c.Proves))
		case probe.Skipped:
			fmt.Fprintf(&e, `<p class="reason"><strong>not made:</strong> %s</p>`, Esc(c.Reason))
		default:
			fmt.Fprintf(&e, `<p class="reason"><strong>why:</strong> %s</p>`, Esc(c.Reason))
		}
		if c.Money != "" {
			fmt.Fprintf(&e, `<p class="money"><strong>money:</strong> %s</p>`, Esc(c.Money))
		}
		e.WriteString(string(evidence(c, warnings)))
		e.WriteString("</article>\n")
	}
	d.Section("each-check", "Each check, with its evidence", template.HTML(e.String()))

	var rows [][]Cell
	dt := func(k, v string) { rows = append(rows, []Cell{{Text: k, Class: "key"}, C(v)}) }
	ct := rep.Contract
	dt("contract", fmt.Sprintf("POST %s · %s · %s → %s", ct.Path, ct.AuthHeader, ct.KeyHeader, ct.IDField))
	if a := rep.Preflight.Attempt; a != nil && a.Answer != nil {
		dt("first transfer", "answered "+a.Answer.String())
	}
	yes := map[bool]string{true: "yes", false: "no"}
	caps := rep.Capabilities
	dt("the target shows", fmt.Sprintf("balance in answers: %s · replays marked: %s · key lookup: %s · exact balances: %s",
		yes[caps.Balance], yes[caps.Replayed], yes[caps.Lookup], yes[caps.Exact]))
	if rep.Balances != "" {
		dt("balances", rep.Balances)
	}
	if rep.Restore != nil {
		mark := "✓ "
		if !rep.Restore.OK {
			mark = "⚠ "
		}
		dt("restore", mark+rep.Restore.Result)
	}
	for _, u := range rep.Unchecked {
		dt("not checked: "+u.What, u.Why+"; to check it: "+u.Flag)
	}
	g := Table{ID: "target-table", Head: []string{"", ""}, Rows: rows}.HTML()
	d.Section("target", "The target", g)
	return d
}

// evidence is a check's evidence lines: ✓, ✗, ? and ⚠ marked; a warning
// said as its particulars and a link to the warning; hang-up rounds as a
// strip of marks (each round's line on hover) and a table; folded when
// long, unless the check failed.
func evidence(c probe.Result, warnings []ProbeWarning) template.HTML {
	var rounds []hangUpRound
	var items []string
	roundsAt := -1
	for _, line := range c.Evidence {
		if r, ok := parseRound(line); ok {
			if roundsAt < 0 {
				roundsAt = len(items)
				items = append(items, "")
			}
			rounds = append(rounds, r)
			continue
		}
		cls := ""
		text := Esc(line)
		switch {
		case strings.HasPrefix(line, "✓"):
			cls = "ok"
		case strings.HasPrefix(line, "✗"):
			cls = "bad"
		case strings.HasPrefix(line, "?"):
			cls = "warn"
		case isWarning(line):
			cls = "warn"
			detail, _, _ := splitWarning(line)
			n := warningOf(warnings, line)
			text = fmt.Sprintf(`⚠ %s — <a class="see-warning" href="#warning-%d">see warning %d</a>`, Esc(detail), n, n)
		}
		if cls != "" {
			cls = fmt.Sprintf(` class="%s"`, cls)
		}
		items = append(items, fmt.Sprintf("<li%s>%s</li>", cls, text))
	}
	var strip string
	if len(rounds) > 0 {
		var b strings.Builder
		count := map[string]int{}
		for _, r := range rounds {
			count[r.Kind]++
		}
		fmt.Fprintf(&b, `<div class="rounds-summary"><p><strong>%d rounds</strong>, one mark each (hover for the round):</p><div class="strip" role="img" aria-label="%d hang-up rounds">`, len(rounds), len(rounds))
		for _, r := range rounds {
			fmt.Fprintf(&b, `<span class="%s" title="%s">%s</span>`, r.Kind, Esc(r.Line), roundLook[r.Kind].sym)
		}
		b.WriteString(`</div><p class="legend">`)
		for _, k := range []string{"answered", "hung-up", "waited"} {
			if count[k] > 0 {
				fmt.Fprintf(&b, "%s %d %s<br>", roundLook[k].sym, count[k], Esc(roundLook[k].words))
			}
		}
		b.WriteString(`</p><details class="rounds"><summary>every round</summary><table class="rounds"><thead><tr><th>round</th><th>hung up</th><th>what happened</th><th>the retry was told</th></tr></thead><tbody>`)
		for _, r := range rounds {
			moment := r.Moment
			if moment == "" {
				moment = "after the answer"
			}
			fmt.Fprintf(&b, `<tr><td class="num">%s %d</td><td>%s</td><td>%s</td><td>%s</td></tr>`, roundLook[r.Kind].sym, r.N, Esc(moment), Esc(r.What), Esc(r.Retried))
		}
		b.WriteString("</tbody></table></details></div>")
		strip = b.String()
		items[roundsAt] = fmt.Sprintf(`<li class="rounds-ref">%d rounds: see the strip above</li>`, len(rounds))
	}
	if len(items) == 0 {
		return template.HTML(strip)
	}
	list := `<ol class="evidence">` + strings.Join(items, "\n") + "</ol>"
	if len(items) <= longEvidence {
		return template.HTML(strip + list)
	}
	open := ""
	if c.Status == probe.Fail {
		open = " open"
	}
	return template.HTML(fmt.Sprintf(`%s<details class="evidence"%s><summary>evidence: %d lines</summary>%s</details>`, strip, open, len(items), list))
}
