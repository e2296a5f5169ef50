package probe

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// The probe's money model. It knows each account's balance when it has been
// told one, by an exact read (Balances) or by an answer's balance, and keeps
// it up to date with every transfer the target acknowledged. Two ways to
// catch money moving wrongly follow:
//
//   - with an exact source, every check is framed by two reads: each account
//     must have moved by exactly the acknowledged transfers (at most once
//     each) and the total must be conserved;
//   - with balances in answers only, each new transfer's reported balance
//     must be the known balance minus its amount: a transfer that ran twice,
//     or a debit that was lost, shows as a balance that does not follow.

// establish takes an exact read as the truth.
func (r *run) establish(b map[ID]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, v := range b {
		r.known[id] = v
		if _, ok := r.opening[id]; !ok {
			r.opening[id] = v
		}
	}
}

// receipt is one transfer the target reported, and the intent it answered.
type receipt struct {
	in *intent
	a  *Answer
}

// debit takes receipts the target gave (at most one per new transfer id)
// into the model, in the order the target applied them: for concurrent
// transfers from one account, the order of their balances. It fails the
// check when a reported balance does not follow from the known one, and
// when a transfer id was already another intent's.
func (c *checkRun) debit(rs ...receipt) {
	var fresh []receipt
	for _, rc := range rs {
		c.mu.Lock()
		first, seen := c.seen[rc.a.TransferID]
		if !seen {
			c.seen[rc.a.TransferID] = rc.in
		}
		c.mu.Unlock()
		switch {
		case !seen:
			fresh = append(fresh, rc)
		case first != rc.in:
			c.failf("%s was answered with transfer %s, which is the answer to %s (key %s): one intent was told another's outcome", rc.in.Label, rc.a.TransferID, first.Label, shortKey(first.Key))
		}
	}
	sort.SliceStable(fresh, func(i, j int) bool {
		bi, bj := fresh[i].a.Balance, fresh[j].a.Balance
		return bi != nil && bj != nil && *bi > *bj
	})
	drifts := 0
	for _, rc := range fresh {
		t := rc.in.T
		c.mu.Lock()
		known, isKnown := c.known[t.From]
		c.net[t.From] -= t.Amount
		c.net[t.To] += t.Amount
		if to, ok := c.known[t.To]; ok {
			c.known[t.To] = to + t.Amount
		}
		if rc.a.Balance != nil {
			c.caps.Balance = true
			c.known[t.From] = *rc.a.Balance
		} else if isKnown {
			c.known[t.From] = known - t.Amount
		}
		c.mu.Unlock()
		if rc.a.Balance == nil || !isKnown {
			continue
		}
		c.checked = true
		if want := known - t.Amount; *rc.a.Balance != want {
			if drifts++; drifts > 2 {
				continue
			}
			c.failf("transfer %s (%s of %s) left %s with %s, but it had %s before it: %s",
				rc.a.TransferID, rc.in.Label, Kobo(t.Amount), t.From, Kobo(*rc.a.Balance), Kobo(known), drift(*rc.a.Balance-want, t.Amount))
		}
	}
	if drifts > 2 {
		c.failf("%d more transfers' balances do not follow either", drifts-2)
	}
}

// drift explains a balance that is off by d after a transfer of amount.
func drift(d, amount int64) string {
	switch {
	case d < 0 && -d%amount == 0:
		return fmt.Sprintf("%s more left the account than the answers account for, %d more transfer(s) of this amount than were answered (a transfer ran again)", Kobo(-d), -d/amount)
	case d < 0:
		return fmt.Sprintf("%s more left the account than the answers account for", Kobo(-d))
	case d%amount == 0:
		return fmt.Sprintf("%s more is left than the answers account for: %d debit(s) of this amount were lost, money created from nothing", Kobo(d), d/amount)
	default:
		return fmt.Sprintf("%s more is left than the answers account for", Kobo(d))
	}
}

// money ends a check: with an exact source, the accounts must have moved by
// exactly the acknowledged transfers, each once (and those of unknown
// outcome at most once), and the total must be conserved.
func (c *checkRun) money(ctx context.Context) {
	if c.cfg.Balances == nil {
		switch {
		case c.checked:
			c.res.Money = "the balances in the answers follow from the acknowledged transfers"
		case c.needMoney:
			c.unknownf("whether money moved more than once cannot be told from the answers: the target reports no balance (--balance-field) and no balance source was given (--balances-url or --database-url with --balances-sql)")
		}
		return
	}
	if c.before == nil {
		return
	}
	after, err := c.readBalances(ctx)
	if err != nil {
		c.unknownf("the balances could not be read after the check: %v", err)
		return
	}
	c.establish(after)
	ids := c.cfg.accounts()
	want := map[ID]int64{}
	for _, t := range c.moves {
		want[t.From] -= t.Amount
		want[t.To] += t.Amount
	}
	var lines []string
	var before, total int64
	for _, id := range ids {
		b, okB := c.before[id]
		a, okA := after[id]
		if !okB || !okA {
			continue
		}
		before += b
		total += a
		lines = append(lines, fmt.Sprintf("%s %s → %s", id, Kobo(b), Kobo(a)))
	}
	c.res.Money = fmt.Sprintf("read: %s; total %s → %s", strings.Join(lines, ", "), Kobo(before), Kobo(total))
	c.evidence("balances %s", c.res.Money)
	c.checked = true
	if before != total {
		c.failf("the total of the accounts went from %s to %s: money was %s", Kobo(before), Kobo(total), map[bool]string{true: "created", false: "destroyed (or moved to an account the probe cannot read)"}[total > before])
	}
	// The acknowledged moves must explain the deltas; each maybe may have
	// happened once or not at all.
	if !c.explained(after, want) {
		var got []string
		for _, id := range ids {
			if b, ok := c.before[id]; ok {
				if a, ok := after[id]; ok {
					got = append(got, fmt.Sprintf("%s %+d", id, a-b))
				}
			}
		}
		var exp []string
		for _, id := range ids {
			exp = append(exp, fmt.Sprintf("%s %+d", id, want[id]))
		}
		msg := fmt.Sprintf("the accounts moved by %s kobo, but the acknowledged transfers account for %s", strings.Join(got, ", "), strings.Join(exp, ", "))
		if len(c.maybe) > 0 {
			msg += fmt.Sprintf(" (plus at most once each of %d transfer(s) of unknown outcome)", len(c.maybe))
		}
		if d, amount, ok := c.single(after, want); ok {
			msg += ": " + drift(d, amount)
		}
		c.failf("%s", msg)
	} else {
		c.okf("each account moved by exactly the acknowledged transfers, each once")
	}
}

// explained reports whether after - before equals want plus some subset of
// the maybe transfers.
func (c *checkRun) explained(after, want map[ID]int64) bool {
	n := min(len(c.maybe), 12)
	for mask := 0; mask < 1<<n; mask++ {
		w := map[ID]int64{}
		for id, v := range want {
			w[id] = v
		}
		for i := 0; i < n; i++ {
			if mask&(1<<i) != 0 {
				w[c.maybe[i].From] -= c.maybe[i].Amount
				w[c.maybe[i].To] += c.maybe[i].Amount
			}
		}
		ok := true
		for id, b := range c.before {
			if a, read := after[id]; read && a-b != w[id] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// single explains the payer's drift in units of the check's amount, when
// the check moved one amount only.
func (c *checkRun) single(after, want map[ID]int64) (int64, int64, bool) {
	p := c.cfg.Payer.Account
	b, okB := c.before[p]
	a, okA := after[p]
	if !okB || !okA || len(c.moves) == 0 {
		return 0, 0, false
	}
	amount := c.moves[0].Amount
	for _, t := range c.moves {
		if t.Amount != amount {
			return 0, 0, false
		}
	}
	return (a - b) - want[p], amount, true
}

// knownBalance returns the payer's balance, when the probe knows it.
func (r *run) knownBalance(id ID) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.known[id]
	return b, ok
}
