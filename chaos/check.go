package chaos

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
)

// Violation kinds, one per check.
const (
	KindTotal      = "total-not-conserved"    // an audit or the end saw another total
	KindNegative   = "negative-balance"       // a balance below zero
	KindTwice      = "moved-twice"            // one intent, more than one transfer
	KindAckMissing = "acknowledged-missing"   // told 201, but that transfer is not its own, once
	KindRejected   = "rejected-but-moved"     // told a final refusal, but money moved
	KindReplay     = "replay-differs"         // a replay differs from the original answer
	KindStuckKey   = "key-in-progress"        // a key still in progress after healing
	KindUnresolved = "unresolved"             // an intent still unknown after healing
	KindLedger     = "balance-ledger-differs" // a balance is not opening + credits − debits
	KindKeyLost    = "key-lost"               // an acknowledged intent's key is not completed after a crash
)

// Kinds lists every violation kind in the order Check reports them.
func Kinds() []string {
	return []string{KindTotal, KindNegative, KindTwice, KindAckMissing, KindRejected, KindReplay,
		KindStuckKey, KindUnresolved, KindLedger, KindKeyLost}
}

// Violation is one broken rule.
type Violation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Intent is the index of the intent involved, or -1.
	Intent int `json:"intent"`
	// AtNs is when it could first be seen, as an offset from the start.
	AtNs int64 `json:"atNs"`
	// Kobo is how much money it involves: the measure of "worst".
	Kobo int64 `json:"kobo"`
}

// Result is the checker's verdict on a history.
type Result struct {
	Violations []Violation    `json:"violations"`
	ByKind     map[string]int `json:"byKind"`
	First      *Violation     `json:"first,omitempty"`
	Worst      *Violation     `json:"worst,omitempty"`
	Stats      Stats          `json:"stats"`
	Checks     []CheckSummary `json:"checks"`
}

// CheckSummary is one check and how often it failed.
type CheckSummary struct {
	Kind       string `json:"kind"`
	Violations int    `json:"violations"`
}

// Valid reports whether the history broke nothing.
func (r Result) Valid() bool { return len(r.Violations) == 0 }

// Check verifies a history: it reads only the history, never the database,
// and runs in time linear in the history's length (intents, attempts,
// audits × accounts, transfers).
func Check(h *History) Result {
	c := checker{h: h, res: Result{ByKind: map[string]int{}}}
	c.money()
	c.intents()
	c.keys()
	c.keysSurvived()
	c.finish()
	return c.res
}

type checker struct {
	h   *History
	res Result
}

func (c *checker) add(v Violation) {
	c.res.Violations = append(c.res.Violations, v)
	c.res.ByKind[v.Kind]++
}

func (c *checker) end() int64 { return int64(c.h.Duration) }

// money checks every audit and the final ledger: the total, no negative
// balance, and each final balance against the transfers.
func (c *checker) money() {
	var want int64
	for _, a := range c.h.Opening {
		want += a.BalanceKobo
	}
	for n, a := range c.h.Audits {
		var got int64
		for k, b := range a.Balances {
			got += b
			if b < 0 {
				c.add(Violation{Kind: KindNegative, Intent: -1, AtNs: a.AtNs, Kobo: -b,
					Detail: fmt.Sprintf("audit %d: account %d has %s", n+1, c.accountID(k), bank.Naira(b))})
			}
		}
		if got != want {
			c.add(Violation{Kind: KindTotal, Intent: -1, AtNs: a.AtNs, Kobo: abs(got - want),
				Detail: fmt.Sprintf("audit %d at %s: total %s, expected %s", n+1, time.Duration(a.AtNs).Round(time.Millisecond), bank.Naira(got), bank.Naira(want))})
		}
	}
	f := c.h.Final
	if got := f.Total(); got != want {
		c.add(Violation{Kind: KindTotal, Intent: -1, AtNs: c.end(), Kobo: abs(got - want),
			Detail: fmt.Sprintf("at the end: total %s, expected %s", bank.Naira(got), bank.Naira(want))})
	}
	expected := make(map[int64]int64, len(c.h.Opening))
	for _, a := range c.h.Opening {
		expected[a.ID] = a.BalanceKobo
	}
	for _, t := range f.Transfers {
		expected[t.From] -= t.AmountKobo
		expected[t.To] += t.AmountKobo
	}
	for _, a := range f.Accounts {
		if a.BalanceKobo < 0 {
			c.add(Violation{Kind: KindNegative, Intent: -1, AtNs: c.end(), Kobo: -a.BalanceKobo,
				Detail: fmt.Sprintf("at the end: account %d has %s", a.ID, bank.Naira(a.BalanceKobo))})
		}
		if want := expected[a.ID]; want != a.BalanceKobo {
			c.add(Violation{Kind: KindLedger, Intent: -1, AtNs: c.end(), Kobo: abs(a.BalanceKobo - want),
				Detail: fmt.Sprintf("account %d has %s, but its opening balance plus credits minus debits is %s", a.ID, bank.Naira(a.BalanceKobo), bank.Naira(want))})
		}
	}
}

func (c *checker) accountID(k int) int64 {
	if k < len(c.h.Opening) {
		return c.h.Opening[k].ID
	}
	return int64(k + 1)
}

// intents checks each intent against the ledger and against itself.
func (c *checker) intents() {
	byIntent := make(map[string][]bank.TransferRow, len(c.h.Intents))
	byID := make(map[int64]bank.TransferRow, len(c.h.Final.Transfers))
	for _, t := range c.h.Final.Transfers {
		byIntent[t.Intent] = append(byIntent[t.Intent], t)
		byID[t.ID] = t
	}
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		rows := byIntent[in.Label]
		amount := in.Request.AmountKobo
		last := c.end()
		if n := len(in.Attempts); n > 0 {
			last = in.Attempts[n-1].EndNs
		}
		if len(rows) > 1 {
			c.add(Violation{Kind: KindTwice, Intent: in.Index, AtNs: last, Kobo: int64(len(rows)-1) * amount,
				Detail: fmt.Sprintf("%s moved money %d times (transfers %s)", in.Label, len(rows), transferIDs(rows))})
		}
		var original *Attempt
		sawOK, sawRejected := false, false
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown {
				continue
			}
			resp := a.Response()
			if a.Seen == SeenOK {
				sawOK = true
				rc, _ := resp.Receipt()
				row, ok := byID[rc.TransferID]
				switch {
				case !ok:
					c.add(Violation{Kind: KindAckMissing, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
						Detail: fmt.Sprintf("%s was told transfer %d succeeded (attempt %d), but it does not exist", in.Label, rc.TransferID, a.N)})
				case row.Intent != in.Label:
					c.add(Violation{Kind: KindAckMissing, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
						Detail: fmt.Sprintf("%s was told transfer %d succeeded (attempt %d), but that transfer belongs to %s", in.Label, rc.TransferID, a.N, orNone(row.Intent))})
				case row.From != in.Request.From || row.To != in.Request.To || row.AmountKobo != amount:
					c.add(Violation{Kind: KindAckMissing, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
						Detail: fmt.Sprintf("%s asked for %s from %d to %d and was told transfer %d succeeded, but it moved %s from %d to %d",
							in.Label, bank.Naira(amount), in.Request.From, in.Request.To, rc.TransferID, bank.Naira(row.AmountKobo), row.From, row.To)})
				}
			} else {
				sawRejected = true
			}
			if original == nil || original.Replayed && !a.Replayed {
				if original != nil && !sameResponse(*original, *a) {
					c.add(Violation{Kind: KindReplay, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
						Detail: fmt.Sprintf("%s: attempt %d answered %s, but replay attempt %d answered %s", in.Label, a.N, a.Response().Summary(), original.N, original.Response().Summary())})
				}
				original = a
				continue
			}
			if !sameResponse(*original, *a) {
				c.add(Violation{Kind: KindReplay, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
					Detail: fmt.Sprintf("%s: attempt %d answered %s, but attempt %d answered %s", in.Label, original.N, original.Response().Summary(), a.N, resp.Summary())})
			}
		}
		if sawRejected && !sawOK && len(rows) > 0 {
			c.add(Violation{Kind: KindRejected, Intent: in.Index, AtNs: last, Kobo: amount,
				Detail: fmt.Sprintf("%s was told it was refused, but it moved money (transfers %s)", in.Label, transferIDs(rows))})
		}
		if in.Outcome == SeenUnknown {
			c.add(Violation{Kind: KindUnresolved, Intent: in.Index, AtNs: last, Kobo: amount,
				Detail: fmt.Sprintf("%s still has no final answer after healing (%d attempts, the last %s)", in.Label, len(in.Attempts), lastSeen(in))})
		}
	}
}

func (c *checker) keys() {
	for _, k := range c.h.StuckKeys {
		c.add(Violation{Kind: KindStuckKey, Intent: -1, AtNs: c.end(),
			Detail: fmt.Sprintf("key %s is still in progress after healing", k)})
	}
}

// keysSurvived checks, in a run where PostgreSQL was killed, that the key of
// every acknowledged transfer is completed at the end: a crash lost no
// stored answer, so a retry of any of them is still a replay. A server
// that keeps its keys in memory, or unscoped, stores none in the table to
// check; other checks catch those.
func (c *checker) keysSurvived() {
	if len(c.h.Crashes) == 0 {
		return
	}
	if b := c.h.Config.Bug; b != nil && (b.MemoryKeys || b.Store.Unscoped) {
		return
	}
	have := make(map[string]bool, len(c.h.CompletedKeys))
	for _, k := range c.h.CompletedKeys {
		have[k] = true
	}
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		for _, a := range in.Attempts {
			if a.Seen != SeenOK || a.Lookup {
				continue
			}
			if k := fmt.Sprintf("%d/%s", in.UserID, a.Key); !have[k] {
				c.add(Violation{Kind: KindKeyLost, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
					Detail: fmt.Sprintf("%s was told it succeeded (attempt %d, key %s), but after the crash its key is not completed", in.Label, a.N, a.Key)})
				break
			}
		}
	}
}

func (c *checker) finish() {
	for k := range c.res.Violations {
		v := &c.res.Violations[k]
		if c.res.First == nil || v.AtNs < c.res.First.AtNs {
			c.res.First = v
		}
		if c.res.Worst == nil || v.Kobo > c.res.Worst.Kobo {
			c.res.Worst = v
		}
	}
	for _, k := range Kinds() {
		if k == KindKeyLost && len(c.h.Crashes) == 0 {
			continue // checked only across a crash
		}
		c.res.Checks = append(c.res.Checks, CheckSummary{Kind: k, Violations: c.res.ByKind[k]})
	}
	c.res.Stats = Summarize(c.h)
}

// sameResponse compares two answers as JSON values: the stored body comes
// back from jsonb with its own spacing and key order.
func sameResponse(a, b Attempt) bool {
	if a.Status != b.Status {
		return false
	}
	if bytes.Equal(a.Body, b.Body) {
		return true
	}
	ca, errA := idem.Canonical(a.Body)
	cb, errB := idem.Canonical(b.Body)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

func lastSeen(in *Intent) string {
	if len(in.Attempts) == 0 {
		return "never sent"
	}
	a := in.Attempts[len(in.Attempts)-1]
	if a.Error != "" && a.Status == 0 {
		return a.Error
	}
	return a.Response().Summary()
}

func transferIDs(rows []bank.TransferRow) string {
	s := make([]string, len(rows))
	for i, r := range rows {
		s[i] = fmt.Sprint(r.ID)
	}
	return strings.Join(s, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "no intent"
	}
	return s
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Timeline is the story of one intent, a line per attempt, for a failure
// message.
func Timeline(h *History, index int) []string {
	if index < 0 || index >= len(h.Intents) || h.Intents[index].Index != index {
		found := false
		for k := range h.Intents {
			if h.Intents[k].Index == index {
				index, found = k, true
				break
			}
		}
		if !found {
			return nil
		}
	}
	in := h.Intents[index]
	lines := []string{fmt.Sprintf("%s: user %d sends %s from account %d to %d, key %s",
		in.Label, in.UserID, bank.Naira(in.Request.AmountKobo), in.Request.From, in.Request.To, in.Key)}
	for _, a := range in.Attempts {
		fault := a.Fault
		if fault == "" {
			fault = "no fault"
		}
		what := a.Error
		if a.Status != 0 {
			what = a.Response().Summary()
		}
		key := ""
		if a.Key != in.Key {
			key = ", key " + a.Key
		}
		if a.Lookup {
			key += ", GET /transfers?key="
		}
		lines = append(lines, fmt.Sprintf("  %9s  attempt %d (%s, server %d, %s%s): %s → %s",
			time.Duration(a.StartNs).Round(time.Microsecond), a.N, a.Phase, a.Instance+1, fault, key, what, a.Seen))
	}
	lines = append(lines, "  outcome: "+in.Outcome)
	return lines
}
