package chaos

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
)

// Events is a history told as one line per event, in the order they
// happened: every attempt (by its start), every audit, the cleanup job, and
// then what the run left behind (balances, transfers, keys). Two runs that
// did the same thing have the same lines.
func Events(h *History) []string {
	type ev struct {
		at   int64
		line string
	}
	var evs []ev
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			what := a.Error
			if a.Status != 0 {
				what = a.Response().Summary()
			}
			evs = append(evs, ev{a.StartNs, fmt.Sprintf("%s: %s attempt %d (%s, server %d, %s, key %s) → %s, %s [%s]",
				at(h, a.StartNs), in.Label, a.N, a.Phase, a.Instance+1, orNoFault(a.Fault), a.Key, what, a.Seen, at(h, a.EndNs))})
		}
	}
	for i, s := range h.Audits {
		evs = append(evs, ev{s.AtNs, fmt.Sprintf("%s: audit %d %v", at(h, s.AtNs), i+1, s.Balances)})
	}
	for _, f := range h.Freezes {
		evs = append(evs, ev{f.AtNs, fmt.Sprintf("%s: account %d frozen under %s", at(h, f.AtNs), f.Account, f.Intent)})
	}
	if c := h.Cleanup; c != nil {
		evs = append(evs, ev{c.AtNs, fmt.Sprintf("%s: cleanup deleted %v", at(h, c.AtNs), c.Deleted)})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.line)
	}
	for _, s := range h.Stalls {
		out = append(out, "stalled: "+s)
	}
	for _, a := range h.Final.Accounts {
		out = append(out, fmt.Sprintf("end: account %d %s %d kobo", a.ID, a.Status, a.BalanceKobo))
	}
	for _, t := range h.Final.Transfers {
		out = append(out, fmt.Sprintf("end: transfer %d %s %d→%d %d kobo", t.ID, t.Intent, t.From, t.To, t.AmountKobo))
	}
	out = append(out, "end: keys in progress "+strings.Join(h.StuckKeys, " "), "end: keys completed "+strings.Join(h.CompletedKeys, " "))
	return out
}

// FirstDifference describes where two histories part: the first event that
// differs (with the one before it), or the first bytes of the saved
// histories that differ when every event is alike. It is "" when they are
// the same, byte for byte.
func FirstDifference(a, b *History) string {
	ea, eb := Events(a), Events(b)
	for i := range max(len(ea), len(eb)) {
		var x, y string
		if i < len(ea) {
			x = ea[i]
		}
		if i < len(eb) {
			y = eb[i]
		}
		if x != y {
			before := "(the first event)"
			if i > 0 {
				before = ea[i-1]
			}
			return fmt.Sprintf("event %d differs, after: %s\n  first:  %s\n  second: %s", i+1, before, orEnd(x), orEnd(y))
		}
	}
	ba, _ := a.Bytes()
	bb, _ := b.Bytes()
	if bytes.Equal(ba, bb) {
		return ""
	}
	i := 0
	for i < len(ba) && i < len(bb) && ba[i] == bb[i] {
		i++
	}
	return fmt.Sprintf("every event is alike, but the saved histories differ at byte %d: …%s… / …%s…", i, window(ba, i), window(bb, i))
}

func orEnd(s string) string {
	if s == "" {
		return "(no more events)"
	}
	return s
}

func window(b []byte, i int) string {
	lo, hi := max(0, i-40), min(len(b), i+40)
	return string(b[lo:hi])
}

// FirstDifferentDecision describes the first choice at which two runs'
// schedulers parted, or "" when they chose alike.
func FirstDifferentDecision(a, b []Decision) string {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) {
			return fmt.Sprintf("one run made %d choices, the other %d", len(a), len(b))
		}
		x, y := a[i], b[i]
		if x.After != y.After || x.Ran != y.Ran || x.At != y.At {
			return fmt.Sprintf("choice %d, after %q:\n  first:  ran %s at %q (default %s)\n  second: after %q ran %s at %q (default %s)",
				x.Step, x.After, x.Ran, x.At, x.Default, y.After, y.Ran, y.At, y.Default)
		}
	}
	return ""
}
