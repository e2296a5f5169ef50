package htmlreport

import (
	"fmt"
	"html/template"
	"sort"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/chaos"
)

// The timeline draws every attempt of a run twice: as a bar in the lane of
// the client that sent its intent (with a tooltip that says everything
// about it), and as a thinner bar in the lane of the server copy it landed
// on (stacked where attempts overlap). A fault is a dashed red outline on
// the attempt and a ▼ where it struck, on the server copy's lane; an intent
// a violation names is outlined thick; a violation is a ✗ above the lanes
// when it could first be seen; audits, healing, the cleanup job and kills
// of PostgreSQL are vertical lines. Every mark has a shape as well as a
// colour, so the picture reads printed in black and white.

const (
	tlWidth   = 1100
	tlLeft    = 96
	tlRight   = 12
	tlClientH = 14
	tlHitH    = 4 // a server copy's row of attempts
	tlHitRows = 6 // rows a server copy's lane stacks at most
	// maxTooltips bounds the attempts that carry a tooltip: each costs
	// about 150 bytes, and a report must stay small enough to open at
	// once. Past it, clicking an attempt still shows its intent.
	maxTooltips = 8000
	maxVMarks   = 200 // violation marks drawn above the lanes
	// maxAuditLines is how many audits are drawn as lines across the
	// picture; more are ticks along its top.
	maxAuditLines = 40
)

type span struct {
	lane       int
	start, end int64
}

// clientLanes gives each intent its lane: the client that sent it, or, in
// a history that did not record clients, lanes packed so that no two
// intents of one lane overlap. recorded says which.
func clientLanes(h *chaos.History) (lane map[int]int, n int, recorded bool) {
	lane = make(map[int]int, len(h.Intents))
	recorded = len(h.Intents) > 0
	for i := range h.Intents {
		if h.Intents[i].Client <= 0 {
			recorded = false
			break
		}
	}
	if recorded {
		n = h.Config.Clients
		for i := range h.Intents {
			in := &h.Intents[i]
			lane[in.Index] = in.Client - 1
			n = max(n, in.Client)
		}
		return lane, n, true
	}
	type iv struct {
		idx        int
		start, end int64
	}
	var ivs []iv
	for i := range h.Intents {
		in := &h.Intents[i]
		reqs := in.Requests()
		if len(reqs) == 0 {
			continue
		}
		v := iv{idx: in.Index, start: reqs[0].StartNs}
		for _, a := range reqs {
			v.end = max(v.end, a.EndNs)
		}
		ivs = append(ivs, v)
	}
	sort.Slice(ivs, func(a, b int) bool { return ivs[a].start < ivs[b].start })
	var ends []int64
	for _, v := range ivs {
		k := -1
		for j, e := range ends {
			if e <= v.start {
				k = j
				break
			}
		}
		if k < 0 {
			k = len(ends)
			ends = append(ends, 0)
		}
		ends[k] = v.end
		lane[v.idx] = k
	}
	return lane, max(len(ends), 1), false
}

func timelineHTML(h *chaos.History, res chaos.Result, c clock, involved []int) template.HTML {
	lane, nClients, recorded := clientLanes(h)
	nServers := max(h.Config.Instances, 1)
	attempts := 0
	for i := range h.Intents {
		for _, a := range h.Intents[i].Requests() {
			nServers = max(nServers, a.Instance+1)
			attempts++
		}
	}
	bad := make(map[int]bool, len(involved))
	for _, i := range involved {
		bad[i] = true
	}

	// Each server copy's attempts, stacked in rows where they overlap.
	type hit struct {
		in  *chaos.Intent
		a   *chaos.Attempt
		row int
	}
	hits := make([][]hit, nServers)
	for i := range h.Intents {
		in := &h.Intents[i]
		for _, a := range in.Requests() {
			sv := min(max(a.Instance, 0), nServers-1)
			hits[sv] = append(hits[sv], hit{in: in, a: a})
		}
	}
	rows := make([]int, nServers)
	for s := range hits {
		hs := hits[s]
		sort.SliceStable(hs, func(x, y int) bool { return hs[x].a.StartNs < hs[y].a.StartNs })
		var ends []int64
		for k := range hs {
			r := -1
			for j, e := range ends {
				if e <= hs[k].a.StartNs {
					r = j
					break
				}
			}
			if r < 0 && len(ends) < tlHitRows {
				r = len(ends)
				ends = append(ends, 0)
			}
			if r < 0 { // every row busy: the one that frees first
				r = 0
				for j := range ends {
					if ends[j] < ends[r] {
						r = j
					}
				}
			}
			ends[r] = max(ends[r], hs[k].a.EndNs)
			hs[k].row = r
		}
		rows[s] = max(len(ends), 1)
	}

	plotW := float64(tlWidth - tlLeft - tlRight)
	x := func(v int64) float64 { return tlLeft + float64(v)/float64(c.end)*plotW }
	clientsTop := 50
	serversLabel := clientsTop + nClients*tlClientH + 14
	serversTop := serversLabel + 6
	serverTop := make([]int, nServers)
	y := serversTop
	for s := range nServers {
		serverTop[s] = y
		y += rows[s]*(tlHitH+1) + 8
	}
	axisY := y + 4
	s := &SVG{W: tlWidth, H: axisY + 44, Class: "timeline",
		Label: fmt.Sprintf("Timeline of %d attempts: %d client lanes, %d server copy lanes", attempts, nClients, nServers)}
	var b strings.Builder

	// Lanes and their labels.
	clientWord := "clients"
	if !recorded {
		clientWord = "clients (not recorded: lanes packed)"
	}
	fmt.Fprintf(&b, `<text x="4" y="%d" class="group-label">%s</text>`, clientsTop-4, Esc(clientWord))
	b.WriteString(`<g class="lanes clients">`)
	for k := range nClients {
		top := clientsTop + k*tlClientH
		name := fmt.Sprintf("client %d", k+1)
		if !recorded {
			name = fmt.Sprintf("lane %d", k+1)
		}
		fmt.Fprintf(&b, `<g class="lane client"><rect class="lane-bg" x="%d" y="%d" width="%.0f" height="%d"/><text class="lane-label" x="%d" y="%d" text-anchor="end">%s</text></g>`,
			tlLeft, top+1, plotW, tlClientH-2, tlLeft-4, top+10, name)
	}
	b.WriteString(`</g>`)
	fmt.Fprintf(&b, `<text x="4" y="%d" class="group-label">server copies</text>`, serversLabel)
	b.WriteString(`<g class="lanes servers">`)
	for k := range nServers {
		hgt := rows[k]*(tlHitH+1) + 4
		fmt.Fprintf(&b, `<g class="lane server"><rect class="lane-bg" x="%d" y="%d" width="%.0f" height="%d"/><text class="lane-label" x="%d" y="%d" text-anchor="end">server %d</text></g>`,
			tlLeft, serverTop[k], plotW, hgt, tlLeft-4, serverTop[k]+hgt/2+4, k+1)
	}
	b.WriteString(`</g>`)

	// The time axis.
	ticks, labels := c.ticks(10)
	for i, t := range ticks {
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/><text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(t), clientsTop, x(t), axisY, x(t), axisY+13, labels[i])
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, tlLeft, axisY, tlWidth-tlRight, axisY)
	fmt.Fprintf(&b, `<text class="axis-label" x="%.0f" y="%d" text-anchor="middle">%s</text>`, tlLeft+plotW/2, axisY+32, Esc(c.axisTitle()))

	// Moments across every lane: audits, healing, the cleanup job, crashes.
	b.WriteString(string(momentLines(h, c, x, 18, axisY, 20, tlLeft-4)))

	// The attempts.
	b.WriteString(`<g class="attempts">`)
	for i := range h.Intents {
		in := &h.Intents[i]
		top := clientsTop + lane[in.Index]*tlClientH + 3
		for _, a := range in.Requests() {
			x1, x2 := x(a.StartNs), x(a.EndNs)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="8" class="%s" data-i="%d">`, x1, top, max(x2-x1, 0.8), attemptClass("attempt", a, bad[in.Index]), in.Index)
			if attempts <= maxTooltips {
				b.WriteString("<title>")
				b.WriteString(Esc(attemptTitle(in, a, c)))
				b.WriteString("</title>")
			}
			b.WriteString("</rect>")
		}
	}
	b.WriteString(`</g><g class="hits">`)
	for sv := range hits {
		for _, ht := range hits[sv] {
			x1, x2 := x(ht.a.StartNs), x(ht.a.EndNs)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" class="%s" data-i="%d"/>`, x1, serverTop[sv]+3+ht.row*(tlHitH+1), max(x2-x1, 0.8), tlHitH,
				attemptClass("hit", ht.a, bad[ht.in.Index]), ht.in.Index)
		}
	}
	b.WriteString(`</g><g class="strikes">`)
	for sv := range hits {
		for _, ht := range hits[sv] {
			if ht.a.Fault == "" {
				continue
			}
			fmt.Fprintf(&b, `<path class="strike" d="M%.1f %dl-3 -5h6z" data-i="%d"><title>%s</title></path>`, x(ht.a.StartNs), serverTop[sv]+3, ht.in.Index,
				Esc(fmt.Sprintf("%s struck %s attempt %d on server %d at %s", ht.a.Fault, ht.in.Label, ht.a.N, sv+1, c.at(ht.a.StartNs))))
		}
	}
	b.WriteString(`</g><g class="vmarks">`)
	for i, v := range res.Violations {
		if i == maxVMarks {
			break
		}
		fmt.Fprintf(&b, `<text class="vmark" x="%.1f" y="13" text-anchor="middle">✗<title>%s</title></text>`, x(v.AtNs), Esc(v.Kind+" at "+c.at(v.AtNs)+": "+v.Detail))
	}
	b.WriteString(`</g>`)
	s.Raw(b.String())

	var out strings.Builder
	fmt.Fprintf(&out, "<p>%d attempts of %d intents. Each attempt is a bar from when its client sent it to when the client settled on what it saw: in the lane of the client that sent its intent (healing and the repeats included), and again, thinner, in the lane of the server copy it landed on.", attempts, len(h.Intents))
	if !recorded {
		out.WriteString(" This history does not record which client sent each intent (it was saved by an older bank-sim): the intents are packed into lanes where they do not overlap.")
	}
	if attempts > maxTooltips {
		fmt.Fprintf(&out, " Past %d attempts the bars carry no tooltip, to keep the file small: click one to pick out its intent.", maxTooltips)
	} else {
		out.WriteString(" Hover over a bar for the attempt; click it to pick out every attempt of its intent.")
	}
	out.WriteString("</p>\n")
	out.WriteString(timelineLegend)
	out.WriteString(`<p class="noprint"><label>Pick out intent number <input id="tl-find" type="number" min="0" size="6"></label> <span id="tl-info"></span></p>`)
	out.WriteString(`<div class="tl-wrap">`)
	out.WriteString(string(s.HTML()))
	out.WriteString(`</div>`)
	return template.HTML(out.String())
}

// attemptClass is an attempt's classes: what its client saw (ok, rej,
// unk), fault when a fault struck it, viol when a violation names its
// intent.
func attemptClass(base string, a *chaos.Attempt, bad bool) string {
	cl := base
	switch a.Seen {
	case chaos.SeenOK:
		cl += " ok"
	case chaos.SeenRejected:
		cl += " rej"
	default:
		cl += " unk"
	}
	if a.Fault != "" {
		cl += " fault"
	}
	if bad {
		cl += " viol"
	}
	return cl
}

func attemptTitle(in *chaos.Intent, a *chaos.Attempt, c clock) string {
	fault := ""
	if a.Fault != "" {
		fault = " · ✕ " + a.Fault
	}
	what := a.Error
	if a.Status != 0 {
		what = fmt.Sprint(a.Status)
		if a.Replayed {
			what += " replayed"
		}
	}
	if a.Lookup {
		what = "lookup " + what
	}
	if a.Phase == chaos.PhaseKeyless {
		return fmt.Sprintf("%s sent without its key · server %d · %s, took %s · %s → %s", in.Label, a.Instance+1, c.at(a.StartNs), c.span(a.EndNs-a.StartNs), what, a.Seen)
	}
	return fmt.Sprintf("%s attempt %d (%s) · server %d%s · %s, took %s · %s → %s", in.Label, a.N, a.Phase, a.Instance+1, fault, c.at(a.StartNs), c.span(a.EndNs-a.StartNs), what, a.Seen)
}

// momentLines draws the run's moments as vertical lines from y1 to y2:
// each audit's snapshot, the start of healing, the cleanup job, each kill
// of PostgreSQL.
// With many audits (a deterministic run takes one every 500 steps) a line
// each would hide the picture: they become ticks along the top, from rugY,
// labelled at labelX.
func momentLines(h *chaos.History, c clock, x func(int64) float64, y1, y2, rugY int, labelX float64) template.HTML {
	var b strings.Builder
	ay1 := y1
	if len(h.Audits) > maxAuditLines {
		ay1 = rugY
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="end">audits</text>`, labelX, rugY+7)
	}
	var want int64
	for _, a := range h.Opening {
		want += a.BalanceKobo
	}
	var rug strings.Builder // many audits that conserved the total: one path
	kept := 0
	for n, a := range h.Audits {
		var total int64
		for _, v := range a.Balances {
			total += v
		}
		if total == want && ay1 != y1 {
			fmt.Fprintf(&rug, "M%.1f %dv7", x(a.AtNs), ay1)
			kept++
			continue
		}
		state := "conserved"
		if total != want {
			// A broken audit is drawn across, however many there are.
			state = "NOT conserved: expected " + bank.Naira(want)
		}
		fmt.Fprintf(&b, `<line class="audit" x1="%.1f" y1="%d" x2="%.1f" y2="%d"><title>audit %d at %s: total %s, %s</title></line>`,
			x(a.AtNs), y1, x(a.AtNs), y2, n+1, Esc(c.at(a.AtNs)), Esc(bank.Naira(total)), Esc(state))
	}
	if kept > 0 {
		fmt.Fprintf(&b, `<path class="audit audits" d="%s"><title>%d audits' snapshots, each with the total %s, as it opened</title></path>`, rug.String(), kept, Esc(bank.Naira(want)))
	}
	heal := int64(-1)
	for i := range h.Intents {
		for _, a := range h.Intents[i].Attempts {
			if a.Phase == chaos.PhaseHeal && (heal < 0 || a.StartNs < heal) {
				heal = a.StartNs
			}
		}
	}
	if heal >= 0 {
		fmt.Fprintf(&b, `<line class="phase" x1="%.1f" y1="%d" x2="%.1f" y2="%d"><title>healing starts at %s: faults off, unknown intents retried</title></line>%s`,
			x(heal), y1, x(heal), y2, Esc(c.at(heal)), momentLabel(x(heal), y1+8, "healing"))
	}
	if cl := h.Cleanup; cl != nil {
		fmt.Fprintf(&b, `<line class="phase" x1="%.1f" y1="%d" x2="%.1f" y2="%d"><title>the key cleanup job ran at %s (deleted %d keys)</title></line>%s`,
			x(cl.AtNs), y1, x(cl.AtNs), y2, Esc(c.at(cl.AtNs)), len(cl.Deleted), momentLabel(x(cl.AtNs), y1+16, "cleanup"))
	}
	for _, pc := range h.PrimaryChanges {
		// From the moment the old primary stopped answering to the moment
		// the new one answered.
		from, to := x(pc.LostNs), x(pc.SeenNs)
		fmt.Fprintf(&b, `<rect class="failover" x="%.1f" y="%d" width="%.1f" height="%d"><title>the primary changed from %s to %s (%s): lost at %s, the new one answering at %s</title></rect>%s`,
			from, y1, max(to-from, 2), y2-y1, Esc(pc.From), Esc(pc.To), Esc(pc.Cause), Esc(c.at(pc.LostNs)), Esc(c.at(pc.SeenNs)), momentLabel(from, y1+24, "primary changed"))
	}
	for _, cr := range h.Crashes {
		if f := cr.Failover; f != nil && cr.Error == "" {
			// A band from the stall to the first write after: the time the
			// run was failing over, and what the standby missed.
			from, to := x(f.StalledNs), x(cr.UpNs)
			fmt.Fprintf(&b, `<rect class="failover" x="%.1f" y="%d" width="%.1f" height="%d"><title>failover %s</title></rect>%s`,
				from, y1, max(to-from, 2), y2-y1, Esc(cr.FailoverLine()), momentLabel(from, y1+24, "failover"))
		}
		fmt.Fprintf(&b, `<line class="crash" x1="%.1f" y1="%d" x2="%.1f" y2="%d"><title>PostgreSQL killed with SIGKILL at %s</title></line>`,
			x(cr.AtNs), y1, x(cr.AtNs), y2, Esc(c.at(cr.AtNs)))
	}
	return template.HTML(b.String())
}

// momentLabel names a moment's line beside it: to its right, or near the
// right edge, to its left.
func momentLabel(x float64, y int, word string) string {
	if x > tlWidth*0.85 {
		return fmt.Sprintf(`<text class="tick" x="%.1f" y="%d" text-anchor="end">%s →</text>`, x-2, y, word)
	}
	return fmt.Sprintf(`<text class="tick" x="%.1f" y="%d">%s →</text>`, x+2, y, word)
}

// timelineLegend says what every mark means, in shapes as well as colours.
const timelineLegend = `<p class="legend">
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="attempt ok"/></svg> ok (filled dark) ·
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="attempt rej"/></svg> rejected (grey) ·
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="attempt unk"/></svg> unknown (white) ·
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="attempt unk fault"/></svg> a fault struck it (dashed outline) ·
<svg width="10" height="10" aria-hidden="true"><path class="strike" d="M5 9l-4 -7h8z"/></svg> where the fault struck ·
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="attempt ok viol"/></svg> an intent a violation names (thick outline) ·
<svg width="10" height="12" aria-hidden="true"><text x="5" y="10" class="vmark" text-anchor="middle">✗</text></svg> a violation, when first seen ·
<svg width="12" height="12" aria-hidden="true"><line x1="6" y1="0" x2="6" y2="12" class="audit"/></svg> an audit's snapshot (a tick along the top when there are many) ·
<svg width="12" height="12" aria-hidden="true"><line x1="6" y1="0" x2="6" y2="12" class="phase"/></svg> healing / cleanup ·
<svg width="12" height="12" aria-hidden="true"><line x1="6" y1="0" x2="6" y2="12" class="crash"/></svg> PostgreSQL killed ·
<svg width="18" height="10" aria-hidden="true"><rect x="1" y="1" width="16" height="8" class="failover"/></svg> a failover: from the standby's stall to the first write after
</p>`

// timelineJS picks out every attempt of one intent: clicked on the
// timeline, asked for by number, or from an intent's "show it" link. The
// page reads fully without it.
const timelineJS = `(function () {
  var info = document.getElementById('tl-info');
  function pick(i) {
    document.querySelectorAll('svg.timeline .sel').forEach(function (e) { e.classList.remove('sel'); });
    if (i === null || i === '') { return 0; }
    var found = document.querySelectorAll('svg.timeline [data-i="' + i + '"]');
    found.forEach(function (e) { e.classList.add('sel'); });
    return found.length;
  }
  document.addEventListener('click', function (ev) {
    var t = ev.target;
    if (!t || !t.getAttribute) { return; }
    var i = t.getAttribute('data-i');
    if (i === null) { return; }
    if (t.classList.contains('show-intent')) { pick(i); return; }
    if (t.closest && t.closest('svg.timeline')) {
      pick(i);
      var tt = t.querySelector('title');
      if (info) { info.textContent = tt ? tt.textContent : 'intent-' + i; }
    }
  });
  var find = document.getElementById('tl-find');
  if (find) {
    find.addEventListener('input', function () {
      var n = pick(find.value);
      if (info) { info.textContent = find.value === '' ? '' : n + ' mark(s) of intent-' + find.value; }
    });
  }
})();`
