package bank

import (
	"fmt"
	"sort"
	"strings"
)

// Told records what one client was told about one request it sent: the
// intent it belongs to (retries of one tap share it), who asked, what they
// asked for, and the answer. A zero Response.Status means no answer arrived,
// so the client cannot know what happened.
type Told struct {
	Intent   string          `json:"intent"`
	UserID   int64           `json:"userId"`
	Request  TransferRequest `json:"request"`
	Response Response        `json:"response"`
}

// Check is the result of one invariant.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Invariant names, in the order CheckInvariants reports them.
const (
	InvTotal    = "total is conserved"
	InvNegative = "no balance is negative"
	InvOnce     = "no intent moved money twice"
	InvTruth    = "clients were told the truth"
	InvLedger   = "balances match the transfers"
)

// CheckInvariants checks the ledger against the opening balances and against
// what clients were told. Everything it counts comes from the database; the
// Told records are only compared against it, never trusted.
func CheckInvariants(opening []Account, l Ledger, told []Told) []Check {
	return []Check{
		checkTotal(opening, l),
		checkNegative(l),
		checkOnce(l),
		checkTruth(l, told),
		checkLedger(opening, l),
	}
}

// AllOK reports whether every check passed.
func AllOK(checks []Check) bool {
	for _, c := range checks {
		if !c.OK {
			return false
		}
	}
	return true
}

func checkTotal(opening []Account, l Ledger) Check {
	var want int64
	for _, a := range opening {
		want += a.BalanceKobo
	}
	got := l.Total()
	if got == want {
		return Check{InvTotal, true, "total " + Naira(got)}
	}
	verb := "vanished"
	diff := want - got
	if diff < 0 {
		verb, diff = "appeared from nowhere", -diff
	}
	return Check{InvTotal, false, fmt.Sprintf("total %s, expected %s: %s %s", Naira(got), Naira(want), Naira(diff), verb)}
}

func checkNegative(l Ledger) Check {
	var bad []string
	for _, a := range l.Accounts {
		if a.BalanceKobo < 0 {
			bad = append(bad, fmt.Sprintf("%s has %s", a.FirstName(), Naira(a.BalanceKobo)))
		}
	}
	if len(bad) > 0 {
		return Check{InvNegative, false, strings.Join(bad, "; ")}
	}
	return Check{InvNegative, true, "every balance is zero or more"}
}

func checkOnce(l Ledger) Check {
	byIntent := map[string][]int64{}
	for _, t := range l.Transfers {
		if t.Intent != "" {
			byIntent[t.Intent] = append(byIntent[t.Intent], t.ID)
		}
	}
	var bad []string
	for intent, ids := range byIntent {
		if len(ids) > 1 {
			bad = append(bad, fmt.Sprintf("%s moved money %d times (transfers %s)", intent, len(ids), joinIDs(ids)))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		return Check{InvOnce, false, strings.Join(bad, "; ")}
	}
	if len(byIntent) == 0 {
		return Check{InvOnce, true, "no transfer was made"}
	}
	return Check{InvOnce, true, fmt.Sprintf("%s, each at most one transfer", count(len(byIntent), "intent", "intents"))}
}

func checkTruth(l Ledger, told []Told) Check {
	byID := map[int64]TransferRow{}
	byIntent := map[string]int{}
	for _, t := range l.Transfers {
		byID[t.ID] = t
		byIntent[t.Intent]++
	}
	var bad []string
	checked := 0
	for _, t := range told {
		if !t.Response.Final() {
			continue
		}
		checked++
		if rc, ok := t.Response.Receipt(); ok {
			row, exists := byID[rc.TransferID]
			switch {
			case !exists:
				bad = append(bad, fmt.Sprintf("%s was told transfer %d succeeded, but it does not exist", t.Intent, rc.TransferID))
			case row.Intent != t.Intent:
				bad = append(bad, fmt.Sprintf("%s was told transfer %d succeeded, but that transfer belongs to %s", t.Intent, rc.TransferID, orNone(row.Intent)))
			case row.From != t.Request.From || row.To != t.Request.To || row.AmountKobo != t.Request.AmountKobo:
				bad = append(bad, fmt.Sprintf("%s asked for %s from %d to %d and was told transfer %d succeeded, but that transfer moved %s from %d to %d",
					t.Intent, Naira(t.Request.AmountKobo), t.Request.From, t.Request.To, rc.TransferID, Naira(row.AmountKobo), row.From, row.To))
			}
			continue
		}
		if n := byIntent[t.Intent]; n > 0 && t.Intent != "" {
			bad = append(bad, fmt.Sprintf("%s was told %s, but it moved money %s", t.Intent, t.Response.Summary(), count(n, "time", "times")))
		}
	}
	if len(bad) > 0 {
		return Check{InvTruth, false, strings.Join(dedupe(bad), "; ")}
	}
	if checked == 0 {
		return Check{InvTruth, true, "no client was given a final answer, so none could be false"}
	}
	return Check{InvTruth, true, fmt.Sprintf("%s the ledger", count(checked, "final answer matches", "final answers match"))}
}

func checkLedger(opening []Account, l Ledger) Check {
	expected := map[int64]int64{}
	for _, a := range opening {
		expected[a.ID] = a.BalanceKobo
	}
	for _, t := range l.Transfers {
		expected[t.From] -= t.AmountKobo
		expected[t.To] += t.AmountKobo
	}
	var bad []string
	for _, a := range l.Accounts {
		if want := expected[a.ID]; want != a.BalanceKobo {
			bad = append(bad, fmt.Sprintf("%s has %s, but the transfers say %s", a.FirstName(), Naira(a.BalanceKobo), Naira(want)))
		}
	}
	if len(bad) > 0 {
		return Check{InvLedger, false, strings.Join(bad, "; ")}
	}
	return Check{InvLedger, true, fmt.Sprintf("every balance is its opening balance plus credits minus debits (%s)", count(len(l.Transfers), "transfer", "transfers"))}
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "no intent"
	}
	return s
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	out := in[:0]
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
