package htmlreport_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/internal/htmlreport"
)

// history is a clean history shaped like a real run's, built in memory:
// n intents sent by `clients` clients (each one intent after another, so a
// client's attempts never overlap; the client free first takes the next),
// landing on `servers` copies; every
// third intent's first answer is lost (lose-response) and its retry is
// replayed. Accounts are ids 301…, owned two each by users 41…, so no id
// stands for another.
func history(n, clients, servers int) *chaos.History {
	const accounts = 8
	h := &chaos.History{Seed: 77, Config: chaos.Config{Clients: clients, Instances: servers, Accounts: accounts, MaxAttempts: 4,
		Faults: chaos.Rates{chaos.FaultLoseResponse: 0.3}}, Fired: map[string]int{}, Server: map[string]int{}}
	bal := make([]int64, accounts)
	for i := range bal {
		bal[i] = 5_000_000 + int64(i)*1_000
		h.Opening = append(h.Opening, bank.Account{ID: int64(301 + i), OwnerID: int64(41 + i/2), Status: "active", BalanceKobo: bal[i]})
	}
	clock := make([]int64, clients) // each client's next free moment, in ns
	var id int64
	for i := range n {
		fi, ti := i%accounts, (i+3)%accounts
		from, to := int64(301+fi), int64(301+ti)
		amount := int64(1_00 + i%700)
		k := fmt.Sprintf("key-%06d", i)
		// The client free first takes the next intent, as in a real run:
		// which client sends which intent follows no pattern.
		cl := 0
		for k := range clock {
			if clock[k] < clock[cl] {
				cl = k
			}
		}
		in := chaos.Intent{Index: i, Label: fmt.Sprintf("intent-%d", i), UserID: int64(41 + fi/2), Key: k, Client: cl + 1,
			Request: bank.TransferRequest{From: from, To: to, AmountKobo: amount}, Outcome: chaos.SeenOK}
		t := clock[cl] + int64(i%5)*100_000
		id++
		bal[fi] -= amount
		bal[ti] += amount
		body, _ := json.Marshal(bank.Receipt{TransferID: id, From: from, To: to, AmountKobo: amount, BalanceKobo: bal[fi]})
		n := 1
		if i%3 == 0 {
			in.Attempts = append(in.Attempts, chaos.Attempt{N: n, Phase: chaos.PhaseFault, Key: k, Fault: chaos.FaultLoseResponse, Instance: (i / 3) % servers,
				StartNs: t, EndNs: t + 2_000_000, Error: "timed out", Seen: chaos.SeenUnknown})
			h.Fired[chaos.FaultLoseResponse]++
			t += 2_500_000
			n++
		}
		in.Attempts = append(in.Attempts, chaos.Attempt{N: n, Phase: chaos.PhaseFault, Key: k, Instance: (i + n) % servers, StartNs: t, EndNs: t + 800_000 + int64(i%7)*50_000,
			Status: 201, Replayed: n > 1, Body: body, Seen: chaos.SeenOK})
		clock[cl] = in.Attempts[len(in.Attempts)-1].EndNs + 100_000
		h.Intents = append(h.Intents, in)
		h.CompletedKeys = append(h.CompletedKeys, fmt.Sprintf("%d/%s", in.UserID, k))
		h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: id, From: from, To: to, AmountKobo: amount, Intent: in.Label})
		if i%10 == 5 {
			h.Audits = append(h.Audits, chaos.Snapshot{AtNs: t, Balances: append([]int64(nil), bal...)})
		}
	}
	for i, b := range bal {
		h.Final.Accounts = append(h.Final.Accounts, bank.Account{ID: int64(301 + i), OwnerID: int64(41 + i/2), Status: "active", BalanceKobo: b})
	}
	for _, c := range clock {
		h.Duration = max(h.Duration, time.Duration(c))
	}
	return h
}

// movedTwice plants the mistake the lesson starts from in h: intent's
// transfer committed a second time (a retry that was not recognised), the
// final balances as the ledger says. The checker must blame that intent.
func movedTwice(h *chaos.History, intent int) {
	in := h.Intents[intent]
	id := int64(len(h.Final.Transfers) + 1)
	h.Final.Transfers = append(h.Final.Transfers, bank.TransferRow{ID: id, From: in.Request.From, To: in.Request.To, AmountKobo: in.Request.AmountKobo, Intent: in.Label})
	for i := range h.Final.Accounts {
		switch h.Final.Accounts[i].ID {
		case in.Request.From:
			h.Final.Accounts[i].BalanceKobo -= in.Request.AmountKobo
		case in.Request.To:
			h.Final.Accounts[i].BalanceKobo += in.Request.AmountKobo
		}
	}
}

func attemptsOf(h *chaos.History) (all, faulted int) {
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			all++
			if a.Fault != "" {
				faulted++
			}
		}
	}
	return all, faulted
}

// counts counts the elements each selector matches, in one round trip to
// the browser.
func counts(p *browsertest.Page, sels ...string) map[string]int {
	js, _ := json.Marshal(sels)
	return browsertest.Eval[map[string]int](p, fmt.Sprintf(`(function(){var o={}; %s.forEach(function(s){o[s]=document.querySelectorAll(s).length}); return o})()`, js))
}

func render(t *testing.T, d *htmlreport.Doc) string {
	t.Helper()
	var b strings.Builder
	if err := d.Render(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A history saved before clients were recorded still gets lanes: its
// intents packed where they do not overlap, no more lanes than it had
// clients, and the page says the lanes are not clients.
func TestTimelinePacksLanesWhenClientsWereNotRecorded(t *testing.T) {
	t.Parallel()
	h := history(60, 5, 3)
	for i := range h.Intents {
		h.Intents[i].Client = 0
	}
	out := render(t, htmlreport.Chaos(h, chaos.Check(h), htmlreport.ChaosOptions{}))
	lanes := strings.Count(out, `class="lane client"`)
	if lanes < 1 || lanes > 5 {
		t.Errorf("packed lanes: %d, want 1 to 5 (the run had 5 clients)", lanes)
	}
	if !strings.Contains(out, "does not record which client sent each intent") {
		t.Error("the page does not say its lanes are packed, not clients")
	}
	all, _ := attemptsOf(h)
	if got := strings.Count(out, `class="attempt `); got != all+5 { // +5: the legend's swatches
		t.Errorf("attempt bars: %d, want %d", got-5, all)
	}
}

// A long run's report stays small: 1,000 intents and 1,334 attempts (more
// per intent than a real default run's 1.5) in well under 2 MB.
func TestChaosReportOfAThousandIntentsIsSmall(t *testing.T) {
	t.Parallel()
	h := history(1000, 8, 3)
	movedTwice(h, 500)
	out := render(t, htmlreport.Chaos(h, chaos.Check(h), htmlreport.ChaosOptions{}))
	all, _ := attemptsOf(h)
	t.Logf("%d intents, %d attempts: %d bytes", len(h.Intents), all, len(out))
	if len(out) > 2<<20 {
		t.Errorf("report of 1,000 intents: %d bytes, want at most 2 MiB", len(out))
	}
}

// campaignRun is a campaign of three seeds: one VALID, one INVALID, one
// INCONCLUSIVE, judged together INVALID.
func campaignRun() htmlreport.CampaignRun {
	rates := chaos.Rates{chaos.FaultLoseResponse: 0.05}
	full := chaos.CoverageCounts{Paths: map[string]int{chaos.PathReplay: 4, chaos.PathConflict: 2}, Faults: map[string]int{chaos.FaultLoseResponse: 3}}
	part := chaos.CoverageCounts{Paths: map[string]int{chaos.PathReplay: 1, chaos.PathConflict: 0}}
	v := chaos.Violation{Kind: chaos.KindTwice, Intent: 3, AtNs: 120, Kobo: 5_000, Detail: "intent-3 moved money 2 times (transfers 4, 6)"}
	results := []chaos.SeedResult{
		{Seed: 11, Verdict: chaos.Valid, Stats: chaos.Stats{Intents: 30}, Faults: 3, Steps: 900, Hash: strings.Repeat("a1", 32), Coverage: &full},
		{Seed: 12, Verdict: chaos.Invalid, Stats: chaos.Stats{Intents: 30}, Faults: 2, Steps: 950, Hash: strings.Repeat("b2", 32), Coverage: &full, First: &v},
		{Seed: 13, Verdict: chaos.Inconclusive, Stats: chaos.Stats{Intents: 30}, Steps: 870, Hash: strings.Repeat("c3", 32), Coverage: &part},
	}
	verdict, union := chaos.Judge(results, rates)
	return htmlreport.CampaignRun{Seeds: "11-13", Flags: "--intents 30", Results: results, Verdict: verdict, Union: union, Judged: true,
		First: chaos.FirstFailing(results), Rates: rates}
}

// The reports in a real browser: every lane, attempt, fault and violation
// drawn; the violations first, with the involved intent's whole history;
// the plots' axes labelled with units; the coverage table whole; a clean
// run with no violation section; a campaign's rows linking to their
// seeds; the page quiet (no console error, nothing fetched).
func TestChaosReportsInABrowser(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clean := history(60, 5, 3)
	bad := history(60, 5, 3)
	movedTwice(bad, 9)
	cleanRes, badRes := chaos.Check(clean), chaos.Check(bad)
	if len(cleanRes.Violations) != 0 || badRes.ByKind[chaos.KindTwice] != 1 {
		t.Fatalf("test histories: clean has %d violations, the planted one %v; want 0 and one moved-twice", len(cleanRes.Violations), badRes.ByKind)
	}
	write := func(name string, d *htmlreport.Doc) string {
		p := filepath.Join(dir, name)
		if err := htmlreport.WriteFile(p, d); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cleanPath := write("clean.html", htmlreport.Chaos(clean, cleanRes, htmlreport.ChaosOptions{}))
	badPath := write("bad.html", htmlreport.Chaos(bad, badRes, htmlreport.ChaosOptions{Repeat: "bank-sim chaos --seed 77"}))
	run := campaignRun()
	campaignPath := write("campaign.html", htmlreport.Campaign(run))

	start := time.Now()
	b := browsertest.New(t)
	t.Logf("browser started in %s", time.Since(start).Round(time.Millisecond))
	defer func() { t.Logf("browser part took %s", time.Since(start).Round(time.Millisecond)) }()
	all, faulted := attemptsOf(clean)

	p := b.OpenFile(cleanPath)
	p.AssertClean()
	pc := counts(p, "#violations", "svg.timeline g.lane.client", "svg.timeline g.lane.server", "svg.timeline rect.attempt", "svg.timeline rect.hit", "svg.timeline path.strike", "svg.timeline rect.attempt.fault", "svg.timeline line.audit", "#coverage-table tbody tr")
	if n := pc["#violations"]; n != 0 {
		t.Errorf("a run without violations has %d violation sections", n)
	}
	if n := pc["svg.timeline g.lane.client"]; n != 5 {
		t.Errorf("client lanes: %d, want 5 (the run's clients)", n)
	}
	if n := pc["svg.timeline g.lane.server"]; n != 3 {
		t.Errorf("server copy lanes: %d, want 3", n)
	}
	if n := pc["svg.timeline rect.attempt"]; n != all {
		t.Errorf("attempts drawn in client lanes: %d, want %d (every attempt of the history)", n, all)
	}
	if n := pc["svg.timeline rect.hit"]; n != all {
		t.Errorf("attempts drawn in server lanes: %d, want %d", n, all)
	}
	if n, f := pc["svg.timeline path.strike"], pc["svg.timeline rect.attempt.fault"]; n != faulted || f != faulted {
		t.Errorf("faults marked: %d strikes and %d faulted bars, want %d of each", n, f, faulted)
	}
	// Each fault marked on the lane of the server copy it struck.
	perServer := make([]int, 3)
	for _, in := range clean.Intents {
		for _, a := range in.Attempts {
			if a.Fault != "" {
				perServer[a.Instance]++
			}
		}
	}
	got := browsertest.Eval[[]int](p, `[...document.querySelectorAll('svg.timeline g.lane.server')].map(function(l){var bg=l.querySelector('rect'); var t=+bg.getAttribute('y'), h=+bg.getAttribute('height');
		return [...document.querySelectorAll('svg.timeline path.strike')].filter(function(s){var y=+s.getAttribute('d').match(/^M[\d.]+ ([\d.]+)/)[1]; return y>=t && y<=t+h}).length})`)
	if fmt.Sprint(got) != fmt.Sprint(perServer) {
		t.Errorf("faults marked per server copy: %v, want %v", got, perServer)
	}
	if n := pc["svg.timeline line.audit"]; n != len(clean.Audits) {
		t.Errorf("audit snapshots marked on the timeline: %d, want %d", n, len(clean.Audits))
	}
	// Every intent on the lane of the client that sent it: lanes are the
	// clients.
	lanes := browsertest.Eval[map[string][]string](p, `(function(){var ls=[...document.querySelectorAll('svg.timeline g.lane.client')].map(function(l){var bg=l.querySelector('rect'); return [+bg.getAttribute('y'), +bg.getAttribute('height'), l.textContent]});
		var o={}; document.querySelectorAll('svg.timeline rect.attempt').forEach(function(r){var y=+r.getAttribute('y'), i=r.getAttribute('data-i');
		var hit=ls.find(function(l){return y>=l[0] && y<l[0]+l[1]}); (o[i]=o[i]||[]).push(hit?hit[2]:'none')}); return o})()`)
	for _, in := range clean.Intents {
		got := lanes[fmt.Sprint(in.Index)]
		want := fmt.Sprintf("client %d", in.Client)
		if len(got) != len(in.Attempts) || slices.ContainsFunc(got, func(l string) bool { return l != want }) {
			t.Errorf("%s (sent by %s, %d attempts) is drawn in lanes %q", in.Label, want, len(in.Attempts), got)
		}
	}
	if got := browsertest.Eval[string](p, `document.querySelector('svg.timeline rect.attempt[data-i="3"] title').textContent`); !strings.Contains(got, "intent-3 attempt 1") || !strings.Contains(got, "lose-response") {
		t.Errorf("intent-3's first bar's tooltip: %q", got)
	}
	for _, sel := range []string{"svg.plot.throughput", "svg.plot.latency"} {
		x := browsertest.Eval[string](p, "document.querySelector('"+sel+" .x-label').textContent")
		y := browsertest.Eval[string](p, "document.querySelector('"+sel+" .y-label').textContent")
		if !strings.Contains(x, "time since the run started (ms)") || !strings.Contains(y, "(ms)") && !strings.Contains(y, "per second") {
			t.Errorf("%s axes: x %q, y %q; want both labelled with units", sel, x, y)
		}
		if n := p.Count(sel + " line.audit"); n != len(clean.Audits) {
			t.Errorf("%s: %d audit snapshots marked, want %d", sel, n, len(clean.Audits))
		}
		if n := p.Count(sel + " rect.faultbar"); n == 0 {
			t.Errorf("%s: no fault marked", sel)
		}
	}
	if n, want := pc["#coverage-table tbody tr"], len(cleanRes.Coverage.Paths)+len(cleanRes.Coverage.Faults); n != want {
		t.Errorf("coverage rows: %d, want %d (every path and fault)", n, want)
	}
	// Clicking a bar picks out every mark of its intent, on both lanes.
	sel := browsertest.Eval[int](p, `(function(){document.querySelector('svg.timeline rect.attempt[data-i="6"]').dispatchEvent(new MouseEvent('click',{bubbles:true}));
		return document.querySelectorAll('svg.timeline rect.sel').length})()`)
	if want := 2 * len(clean.Intents[6].Attempts); sel != want {
		t.Errorf("clicking intent-6's bar picked out %d bars, want %d", sel, want)
	}
	p.AssertClean()

	q := b.OpenFile(badPath)
	q.AssertClean()
	qc := counts(q, "#violation-list tbody tr", "#intent-9 table tbody tr", "svg.timeline .viol", "svg.timeline .vmark")
	if first := browsertest.Eval[string](q, `document.querySelector('main section').id`); first != "violations" {
		t.Errorf("first section: %q, want the violations", first)
	}
	if n := qc["#violation-list tbody tr"]; n != len(badRes.Violations) {
		t.Errorf("violations listed: %d, want %d", n, len(badRes.Violations))
	}
	if got := q.Text("#violation-list tbody tr"); !strings.Contains(got, chaos.KindTwice) || !strings.Contains(got, "intent-9") {
		t.Errorf("first violation row: %q", got)
	}
	if !browsertest.Eval[bool](q, `document.querySelector('#violation-list a[href="#intent-9"]') !== null && document.getElementById('intent-9') !== null`) {
		t.Error("the violation does not link to intent-9's history")
	}
	if n, want := qc["#intent-9 table tbody tr"], len(bad.Intents[9].Attempts); n != want || want != 2 {
		t.Errorf("intent-9's history: %d attempts, want %d (its lost answer and the replay)", n, want)
	}
	if got := q.Text("#intent-9 table tbody tr"); !strings.Contains(got, "lose-response") || !strings.Contains(got, "unknown") {
		t.Errorf("intent-9's first attempt reads %q; want the fault that struck it and what the client saw", got)
	}
	if n, want := qc["svg.timeline .viol"], 2*len(bad.Intents[9].Attempts); n != want {
		t.Errorf("intent-9's marks outlined as violating: %d, want %d", n, want)
	}
	if n := qc["svg.timeline .vmark"]; n != len(badRes.Violations) {
		t.Errorf("violations marked on the timeline: %d, want %d", n, len(badRes.Violations))
	}
	if v := q.Text("#verdict"); !strings.HasPrefix(v, "✗ INVALID") {
		t.Errorf("verdict reads %q", v)
	}

	c := b.OpenFile(campaignPath)
	c.AssertClean()
	cc := counts(c, "#seed-table tbody tr", "#seed-table tbody a", "#coverage-table tbody tr")
	if n := cc["#seed-table tbody tr"]; n != len(run.Results) {
		t.Errorf("campaign rows: %d, want %d (one per seed)", n, len(run.Results))
	}
	broken := browsertest.Eval[[]string](c, `[...document.querySelectorAll('#seed-table tbody a')].filter(a => !document.getElementById(a.getAttribute('href').slice(1))).map(a => a.textContent)`)
	if len(broken) > 0 || cc["#seed-table tbody a"] != len(run.Results) {
		t.Errorf("seed links: %d, broken %v; want one per seed, each to its details", cc["#seed-table tbody a"], broken)
	}
	c.WaitFor(`(document.querySelector('#seed-table a[href="#seed-12"]').click(), location.hash === '#seed-12')`)
	if got := c.Text(":target"); !strings.Contains(got, "seed 12") || !strings.Contains(got, chaos.KindTwice) {
		t.Errorf("following seed 12's link shows %q", got)
	}
	if got := c.Text("#verdict"); !strings.Contains(got, "INVALID") {
		t.Errorf("campaign verdict %q", got)
	}
	if n, want := cc["#coverage-table tbody tr"], len(run.Union.Paths)+len(run.Union.Faults); n != want {
		t.Errorf("campaign coverage rows: %d, want %d", n, want)
	}
	c.AssertClean()
}

// A run through a failover says so on the page, as the terminal does: the
// run table's failover row (the intent, the replication, what the standby
// lacked, the promotion, the first write after) instead of a restart "on
// the same data", and a marked band on the timeline and on every plot.
func TestChaosReportNamesAFailover(t *testing.T) {
	t.Parallel()
	h := history(60, 5, 3)
	h.Config.Failover = chaos.ReplicationAsync
	mid := h.Intents[30].Attempts[0].StartNs
	h.Crashes = []chaos.Crash{{AfterIntent: 30, AtNs: mid + 2_000_000, UpNs: mid + 9_000_000, Failover: &chaos.FailoverRecord{
		Replication: chaos.ReplicationAsync, StalledNs: mid, Commits: 3, KilledNs: mid + 3_000_000, PromotedNs: mid + 6_000_000,
		PrimaryPort: 5433, ServingPort: 5434}}}
	out := render(t, htmlreport.Chaos(h, chaos.Check(h), htmlreport.ChaosOptions{}))
	line := h.Crashes[0].FailoverLine()
	for _, want := range []string{"at intent 30 (async replication)", "3 commits the standby lacks", "the standby promoted 3ms later", "writes again 6ms after the kill"} {
		if !strings.Contains(line, want) {
			t.Errorf("the failover line %q does not say %q", line, want)
		}
	}
	if !strings.Contains(out, "<td>failover</td>") || !strings.Contains(out, htmlreport.Esc(line)) {
		t.Errorf("the run table has no failover row saying %q", line)
	}
	if strings.Contains(out, "back on the same data") {
		t.Error("the page calls the failover a restart on the same data")
	}
	plots := strings.Count(out, `class="plot `)
	if bands := strings.Count(out, `<rect class="failover" x=`); plots == 0 || bands != plots+1 {
		t.Errorf("failover bands: %d, want one on the timeline and one on each of the %d plots", bands, plots)
	}
}

// A change of primary on a team's cluster is on the page too: the team's
// command and its output, the change (from which host to which, the
// unavailability, the losses that cross it) in the run table, and a band
// on the timeline and every plot.
func TestChaosReportNamesAChangeOfPrimary(t *testing.T) {
	t.Parallel()
	h := history(60, 5, 3)
	mid := h.Intents[30].Attempts[0].StartNs
	h.FailoverCommand = &chaos.FailoverCommand{Command: "patronictl failover --force", AfterIntent: 30, StartNs: mid, EndNs: mid + 4_000_000,
		Output: "Current cluster topology\n+ Cluster: bank <x> +\n"}
	h.PrimaryChanges = []chaos.PrimaryChange{{Cause: chaos.CauseCommand, From: "10.0.0.1:5432", To: "10.0.0.2:5432", FromTimeline: 1, ToTimeline: 2,
		LastSeenNs: mid, LostNs: mid + 1_000_000, SeenNs: mid + 3_000_000}}
	res := chaos.Check(h)
	out := render(t, htmlreport.Chaos(h, res, htmlreport.ChaosOptions{}))
	if len(res.PrimaryChanges) != 1 {
		t.Fatalf("the checker measured %d changes, want 1", len(res.PrimaryChanges))
	}
	for _, want := range []string{htmlreport.Esc(res.PrimaryChanges[0].Line()), htmlreport.Esc(h.FailoverCommand.Line()), "&lt;x&gt;", "10.0.0.1:5432 (timeline 1) → 10.0.0.2:5432 (timeline 2)"} {
		if !strings.Contains(out, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	plots := strings.Count(out, `class="plot `)
	if bands := strings.Count(out, `<rect class="failover" x=`); plots == 0 || bands != plots+1 {
		t.Errorf("bands: %d, want one on the timeline and one on each of the %d plots", bands, plots)
	}
}

// The violations table reads down in time, every time in one unit with
// fixed decimals: the checker lists violations rule by rule, and Go's
// durations mix "573.344ms" with "1.159278s".
func TestChaosViolationsTableInTimeOrderInOneUnit(t *testing.T) {
	t.Parallel()
	h := history(40, 4, 3)
	h.Duration = 2 * time.Second
	res := chaos.Check(h)
	res.Violations = []chaos.Violation{
		{Kind: chaos.KindTwice, Detail: "late", Intent: 9, AtNs: 1_159_278_000},
		{Kind: chaos.KindTwice, Detail: "early", Intent: 3, AtNs: 573_344_000},
		{Kind: chaos.KindTwice, Detail: "soonest", Intent: 6, AtNs: 41_500},
	}
	res.ByKind = map[string]int{chaos.KindTwice: 3}
	res.First, res.Worst = &res.Violations[0], &res.Violations[0]
	out := render(t, htmlreport.Chaos(h, res, htmlreport.ChaosOptions{}))
	start := strings.Index(out, `<table id="violation-list">`)
	if start < 0 {
		t.Fatal("no violations table")
	}
	table, _, _ := strings.Cut(out[start:], "</table>")
	rows := regexp.MustCompile(`<tr><td>[^<]*</td><td[^>]*>.*?</td><td>([^<]*)</td>.*?<td>(\w+)</td></tr>`).FindAllStringSubmatch(table, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1]+" "+r[2])
	}
	want := []string{"0.042 ms soonest", "573.344 ms early", "1,159.278 ms late"}
	if !slices.Equal(got, want) {
		t.Errorf("violations table rows (seen at, what happened):\n got %q\nwant %q", got, want)
	}
}

// A request a target run sent without its key is drawn on its intent's
// lane, before the first attempt, titled as what it was, and counted in
// the run's table: a no-key violation points at a bar on the page.
func TestTimelineDrawsTheRequestSentWithoutAKey(t *testing.T) {
	t.Parallel()
	h := history(12, 3, 1)
	in := &h.Intents[4]
	first := in.Attempts[0]
	in.Keyless = &chaos.Attempt{Phase: chaos.PhaseKeyless, StartNs: first.StartNs - 300_000, EndNs: first.StartNs - 100_000,
		Status: 400, Body: []byte(`{"code":"idempotency_key_required"}`), Seen: chaos.SeenRejected}
	res := chaos.Check(h)
	if res.Stats.Keyless != 1 {
		t.Errorf("stats count %d requests without a key, want 1", res.Stats.Keyless)
	}
	out := render(t, htmlreport.Chaos(h, res, htmlreport.ChaosOptions{}))
	all, _ := attemptsOf(h)
	if got := strings.Count(out, `class="attempt `); got != all+1+5 { // +5: the legend's swatches
		t.Errorf("attempt bars: %d, want %d attempts and the keyless request", got-5, all)
	}
	if !strings.Contains(out, "intent-4 sent without its key · server 1") {
		t.Error("no bar is titled as intent-4's request without its key")
	}
	if !strings.Contains(out, "without a key") || !strings.Contains(out, "refused, as they must be") {
		t.Error("the run's table does not count the requests sent without a key")
	}
	// The plots' numbers: the keyless request is a request finished (and
	// its latency counted), but it settles nothing; intent-4 settles once.
	settled, finished := bucketTotals(t, out)
	if finished != all+1 {
		t.Errorf("the buckets count %d attempts finished, want %d attempts and the keyless request", finished, all+1)
	}
	if settled != len(h.Intents) {
		t.Errorf("the buckets count %d intents settled, want %d", settled, len(h.Intents))
	}
}

// bucketTotals sums the plots' table, bucket by bucket: intents settled
// and attempts finished.
func bucketTotals(t *testing.T, out string) (settled, finished int) {
	t.Helper()
	_, table, ok := strings.Cut(out, `<table id="buckets">`)
	if !ok {
		t.Fatal("no table of buckets")
	}
	table, _, _ = strings.Cut(table, "</table>")
	row := regexp.MustCompile(`<tr><td>[^<]*</td><td>[^<]*</td><td class="num">(\d+)</td><td class="num">(\d+)</td>`)
	rows := row.FindAllStringSubmatch(table, -1)
	if len(rows) == 0 {
		t.Fatalf("no bucket rows in %.300s", table)
	}
	for _, m := range rows {
		var s, f int
		fmt.Sscan(m[1], &s)
		fmt.Sscan(m[2], &f)
		settled, finished = settled+s, finished+f
	}
	return settled, finished
}
