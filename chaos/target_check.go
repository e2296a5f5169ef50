package chaos

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/probe"
	"github.com/banksim/bank-sim/probe/judge"
)

// The rules a black box allows. A target's history has no ledger of
// transfers labelled with their intents, no key store and no side effects
// to read: what the target did is what its answers say (transfer ids,
// statuses, bytes) and, with a balance source, what the balances say.

// answer reads an attempt's answer through the target's contract.
func (t *Target) answer(a Attempt) *probe.Answer {
	h := http.Header{}
	if a.Replayed && t.Contract.ReplayedHeader != "" {
		h.Set(t.Contract.ReplayedHeader, "true")
	}
	return t.Contract.Read(a.Status, h, a.Bytes())
}

// receipts are the distinct transfer ids in's answers named, in order:
// those its client got, and those the proxy dropped on their way (the
// target made those transfers too).
func (t *Target) receipts(in *Intent) []string {
	var ids []string
	for _, a := range in.Attempts {
		id := t.lostID(a)
		if id == "" && a.Seen == SeenOK {
			id = t.answer(a).TransferID
		}
		if id != "" && !contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ledger is the transfers the answers acknowledge, each transfer id once
// (with the first intent told it): what the accounts must have moved by.
func (t *Target) ledger(h *History) []bank.TransferRow {
	var rows []bank.TransferRow
	seen := map[string]bool{}
	for idx := range h.Intents {
		in := &h.Intents[idx]
		for _, id := range t.receipts(in) {
			if seen[id] {
				continue
			}
			seen[id] = true
			rows = append(rows, bank.TransferRow{ID: int64(len(rows) + 1), From: in.Request.From, To: in.Request.To, AmountKobo: in.Request.AmountKobo, Intent: in.Label})
		}
	}
	return rows
}

// allows reports whether a final answer is one the contract allows for in,
// and if not, what it allows. The target's rules (who may send, which
// accounts are active, what a balance allows) are not known from outside:
// a transfer between the two payers' own accounts may be made or refused
// (422), never refused as if its key had been used; a key reused for
// another request must not be answered with a transfer. Whether a refusal
// of a reuse was a refusal of the key is coverage's question (a refusal of
// another kind moved nothing either).
func (t *Target) allows(in *Intent, a *probe.Answer) (bool, string) {
	if in.Reuse != "" {
		return !a.OK(), "only a refusal: the key was first used for another request"
	}
	if a.Receipt() || a.Class == judge.BusinessRefusal && a.Status == 422 {
		return true, ""
	}
	why := "only 2xx with a transfer id (" + t.Contract.IDField + "), or 422 for a refusal such as insufficient funds, never a refusal of the key: " +
		"the user sends from their own account with their own key"
	if a.Class == judge.Other {
		why += fmt.Sprintf(" (%d is an answer the lesson never gives; if it is this target's refusal of a reused key, --key-refusal %d names it, and the answer is still wrong here)", a.Status, a.Status)
	}
	return false, why
}

// checkTarget verifies a target run's history.
func checkTarget(h *History, off map[string]bool) Result {
	c := checker{h: h, f: newFacts(h), res: Result{ByKind: map[string]int{}}, off: off}
	t := h.Config.Target
	var skipped []Unchecked
	if len(h.Final.Accounts) > 0 {
		// The money rules, on the balances read from outside, with the
		// acknowledged transfers as the ledger.
		m := *h
		m.Final.Transfers = t.ledger(h)
		c.h = &m
		c.money()
		c.h = h
		if n := unresolved(h); n > 0 {
			// Their transfers may or may not have happened: the deltas are
			// not the acknowledged transfers' alone, and a mismatch proves
			// nothing (the total and the signs still do).
			kept := c.res.Violations[:0]
			for _, v := range c.res.Violations {
				if v.Kind != KindLedger {
					kept = append(kept, v)
				}
			}
			c.res.Violations, c.res.ByKind[KindLedger] = kept, 0
			skipped = append(skipped, Unchecked{KindLedger, fmt.Sprintf("%d intent(s) have no final answer, so their transfers may or may not have happened", n)})
		}
	}
	c.targetIntents()
	c.targetReplays()
	c.finish()
	c.res.Unchecked = append(t.unchecked(len(h.Final.Accounts) > 0, len(h.Audits) > 0), skipped...)
	for _, u := range skipped {
		c.res.Checks = slices.DeleteFunc(c.res.Checks, func(s CheckSummary) bool { return s.Kind == u.Kind })
	}
	return c.res
}

// unresolved counts the intents without a final answer after healing.
func unresolved(h *History) int {
	n := 0
	for _, in := range h.Intents {
		if in.Outcome == SeenUnknown {
			n++
		}
	}
	return n
}

// targetIntents checks each intent's answers: at most one transfer id per
// intent, no transfer id told to two intents, every final answer one the
// contract allows, and a final answer for every intent after healing.
func (c *checker) targetIntents() {
	t := c.h.Config.Target
	owner := map[string]*Intent{}
	// byKey: each key text's own intents (not reuses), to name another
	// user's when a user's own transfer is refused as a reused key.
	byKey := map[string][]*Intent{}
	for idx := range c.h.Intents {
		if in := &c.h.Intents[idx]; in.Reuse == "" {
			byKey[in.Key] = append(byKey[in.Key], in)
		}
	}
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		amount := in.Request.AmountKobo
		last := c.end()
		if n := len(in.Attempts); n > 0 {
			last = in.Attempts[n-1].EndNs
		}
		ids := t.receipts(in)
		if len(ids) > 1 {
			c.add(Violation{Kind: KindTwice, Intent: in.Index, AtNs: last, Kobo: int64(len(ids)-1) * amount,
				Detail: fmt.Sprintf("%s, one key, was answered with %d different transfers (%s; an answer the proxy dropped counts too): the target moved the money %d times", in.Label, len(ids), strings.Join(ids, ", "), len(ids))})
		}
		for _, id := range ids {
			// Every intent has a transfer of its own, even one user's two
			// intents with one request (two keys): a transfer told to a
			// second intent is the first's outcome.
			first, seen := owner[id]
			switch {
			case !seen:
				owner[id] = in
			default:
				c.add(Violation{Kind: KindAckMissing, Intent: in.Index, AtNs: last, Kobo: amount,
					Detail: fmt.Sprintf("%s (%s) was told transfer %s, which is the answer to %s (%s): one intent was told another's outcome, and its own transfer never happened",
						in.Label, t.describe(in), id, first.Label, t.describe(first))})
			}
		}
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown {
				continue
			}
			ans := t.answer(*a)
			if ok, allowed := t.allows(in, ans); !ok {
				detail := fmt.Sprintf("%s was told %s (attempt %d); the contract allows %s", t.describe(in), ans, a.N, allowed)
				if ans.Class == judge.KeyRefusal {
					if k := slices.IndexFunc(byKey[in.Key], func(o *Intent) bool { return o.UserID != in.UserID }); k >= 0 {
						other := byKey[in.Key][k]
						detail += fmt.Sprintf(". %s, another user, sent the same key text (%s): keys are shared by all users instead of scoped to each, so one user's key refused another's own transfer",
							t.user(other.UserID).Name, other.Label)
					}
				}
				c.add(Violation{Kind: KindWrong, Intent: in.Index, AtNs: a.EndNs, Kobo: amount, Detail: detail})
				break
			}
		}
		if in.Outcome == SeenUnknown {
			c.add(Violation{Kind: KindUnresolved, Intent: in.Index, AtNs: last, Kobo: amount,
				Detail: fmt.Sprintf("%s still has no final answer after healing (%d attempts, the last %s): a key left in progress with nobody working on it answers 409 for ever", in.Label, len(in.Attempts), lastSeen(in))})
		}
	}
}

// targetReplays checks that every later final answer to a key is its first
// one: the same status and transfer id; marked as a replay when the target
// marks replays at all; and byte for byte when it promises so
// (Contract.ExactReplays).
func (c *checker) targetReplays() {
	t := c.h.Config.Target
	marks := false
	for _, in := range c.h.Intents {
		for _, a := range in.Attempts {
			marks = marks || a.Replayed
		}
	}
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		if in.Reuse != "" {
			continue // the key's answer is its first request's; each reuse is refused afresh
		}
		var first *Attempt
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown {
				continue
			}
			if first == nil {
				first = a
				continue
			}
			fa, aa := t.answer(*first), t.answer(*a)
			var why string
			switch {
			case a.Status != first.Status:
				why = fmt.Sprintf("the status differs (%d, then %d): the request ran again", first.Status, a.Status)
			case fa.TransferID != aa.TransferID:
				why = fmt.Sprintf("the transfer differs (%s, then %s)", orNone(fa.TransferID), orNone(aa.TransferID))
			case marks && !a.Replayed:
				why = fmt.Sprintf("it was not marked as a replay (%s), as the target marks others: the request ran again", t.Contract.ReplayedHeader)
			case t.Contract.ExactReplays && !sameBytes(*first, *a):
				why = fmt.Sprintf("the bytes differ, and the target promises byte-for-byte replays: %s, then %s", quote(first.Bytes()), quote(a.Bytes()))
			default:
				continue
			}
			c.add(Violation{Kind: KindReplay, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
				Detail: fmt.Sprintf("%s: attempt %d (%s) answered %s, but attempt %d answered %s; %s", in.Label, a.N, a.Phase, aa, first.N, fa, why)})
		}
	}
}

// describe says who asked what, in the target's names.
func (t *Target) describe(in *Intent) string {
	tr := t.transfer(in.Request)
	s := fmt.Sprintf("%s sends %s from account %s to %s", t.user(in.UserID).Name, probe.Kobo(tr.Amount), tr.From, tr.To)
	if in.Reuse != "" {
		s += fmt.Sprintf(", reusing intent-%d's key with another %s", in.ReuseOf, in.Reuse)
	}
	return s
}

// checkKinds are the rules a target's history is checked by: the answers'
// always, the money's with a balance source.
func (t *Target) checkKinds(h *History) []string {
	kinds := []string{KindTwice, KindAckMissing, KindWrong, KindReplay, KindUnresolved}
	if len(h.Final.Accounts) > 0 {
		kinds = append([]string{KindTotal, KindNegative}, append(kinds, KindLedger)...)
	}
	return kinds
}

// Unchecked is a rule a run could not check, and why.
type Unchecked struct {
	Kind string `json:"kind"`
	Why  string `json:"why"`
}

// Unchecked says plainly which rules a run against t cannot check with
// what the target exposes, before it runs.
func (t *Target) Unchecked() []Unchecked {
	return t.unchecked(t.Balances != nil, t.Balances != nil && t.consistent())
}

// unchecked is Unchecked for a run that read money or not, and audited it
// while transfers ran or not.
func (t *Target) unchecked(money, audits bool) []Unchecked {
	var out []Unchecked
	if !money {
		why := "no balance source: give --balances-url TEMPLATE or --database-url URL with --balances-sql QUERY; the answers alone show transfer ids, not money"
		for _, k := range []string{KindTotal, KindNegative, KindLedger} {
			out = append(out, Unchecked{k, why})
		}
	} else if !audits {
		out = append(out, Unchecked{KindTotal, "checked before and after the run only: the balance source reads one account after another, so it cannot audit while transfers run (a --balances-sql source reads one snapshot, and does)"})
	}
	out = append(out,
		Unchecked{KindRejected, "the target's transfers are not labelled with their intents: a refused intent that moved money shows only as balances that do not add up (" + KindLedger + ")"},
		Unchecked{KindFrozen, "the contract gives no way to freeze an account, and no fault freezes one"},
		Unchecked{KindAbandoned, "the target's key store cannot be read: a key left in progress shows only as an intent still told 409 after healing (" + KindUnresolved + ")"},
		Unchecked{KindStuckKey, "the target's key store cannot be read (see " + KindUnresolved + ")"},
		Unchecked{KindKeyLost, "the target's cleanup job cannot be run from outside"},
		Unchecked{"side effects", "SMS, events, the outbox and its dispatchers are not part of the transfer contract"},
	)
	if !t.Contract.ExactReplays {
		out = append(out, Unchecked{KindReplay + " (bytes)", "replays are compared by status and transfer id only: the target does not promise byte-for-byte replays (--exact-replays)"})
	}
	for _, u := range probe.Outside(len(t.URLs), "a second --target URL", t.Given) {
		out = append(out, Unchecked{u.What, u.Why + "; to check it: " + u.Flag})
	}
	out = append(out, Unchecked{"server-side faults", "cannot be injected into someone else's server: " + strings.Join(ServerSideFaultKinds(), ", ")})
	return out
}

// refusedAsReused reports whether a is the target's refusal of a key used
// before, as the judge names it.
func (t *Target) refusedAsReused(a Attempt) bool {
	return a.Seen != SeenUnknown && t.answer(a).Class == judge.KeyRefusal
}

// applies reports whether a target run can take defence path p: those its
// clients see in the answers (a replay by its transfer id, marked or not);
// the rest happen inside a server.
func (t *Target) applies(p string) bool {
	switch p {
	case PathReplay, PathReplayAfterFinal, PathConcurrentCopy, PathHealed, PathReuseRecipient, PathReuseAmount, PathSharedKey, PathCrossing:
		return true
	}
	return false
}

// PathConcurrentCopy is a target's (chaos --target) conflict-409 or
// wait-then-replay, counted as one: the contract allows either answer to a
// copy sent while another request holds its key, and a server outside
// cannot be told which to give.
const PathConcurrentCopy = "concurrent-copy"

// copiesAnswered hears the answers of the copies of a duplicated request
// (two sent at the same moment with one key) and counts the defence a
// target showed: one copy answered 409 while the other held the key
// (PathConflict), or every copy given the same transfer, the copy that came
// second having waited for the first and been given its answer
// (PathWaited). The contract allows either; copies given two transfers
// showed no defence, and are left to the rules (the money, the replays).
func (t *Target) copiesAnswered(e *engine) func([]*faults.CopyAnswer) {
	return func(answers []*faults.CopyAnswer) {
		conflict, id, same := false, "", 0
		for _, a := range answers {
			if a == nil {
				return // a copy got no answer: nothing to tell
			}
			ans := t.Contract.Read(a.Status, a.Header, a.Body)
			switch {
			case a.Status == http.StatusConflict:
				conflict = true
			case ans.Receipt() && (id == "" || id == ans.TransferID):
				id = ans.TransferID
				same++
			}
		}
		switch {
		case conflict:
			e.count(PathConflict)
		case same == len(answers):
			e.count(PathWaited)
		}
	}
}

// concurrentCopies is how often a target met a copy sent while another
// request held its key, in either way the contract allows: a 409 (seen by
// a client, or by a copy) or a wait for the first request's answer.
func concurrentCopies(counts map[string]int) int {
	return counts[PathConflict] + counts[PathWaited]
}
