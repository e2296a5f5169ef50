package chaos

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/probe"
	"github.com/banksim/bank-sim/probe/judge"
)

// The rules a black box allows. A target's history has no ledger of
// transfers labelled with their intents, no key store and no side effects
// to read: what the target did is what its answers say (transfer ids,
// statuses, bytes) and, with a balance source, what the balances say.

// The rules only a run against a target checks: the defect classes a
// careful reviewer found in real idempotency libraries (issue 27), each
// named as probe's check of it is.
const (
	// KindCrossUser: another user who sends the first user's key and exact
	// body is given the first user's stored answer (or a transfer, or an
	// answer that shows the key exists).
	KindCrossUser = "cross-user-replay"
	// KindRefusedMoved: a key first answered with a refusal later made a
	// transfer (only 2xx answers were stored): a client told "refused" had
	// its money moved by a late retry or a duplicate.
	KindRefusedMoved = "refused-then-moved"
	// KindServerError (with --db-proxy): an intent still answered 5xx by
	// every retry after healing, the database long healed: a server error
	// from a passing database failure stored as the key's final answer.
	KindServerError = "server-error-stored"
	// KindLockPastTTL (with --db-proxy): an intent still told 409 after
	// healing, past the target's lock (--lock-ttl) and --settle: a database
	// failure left its key claimed.
	KindLockPastTTL = "lock-past-ttl"
	// KindKeyLostRestart (with --restart): a key answered with a transfer
	// before the target restarted made another transfer when retried after
	// it: the key store did not outlive the process.
	KindKeyLostRestart = "key-lost-on-restart"
	// KindNoKey: a transfer request sent without its key was not refused:
	// it made a transfer, was answered 2xx, or failed 5xx (judged by
	// probe.JudgeRefusal, as probe's check of the same name judges it). A
	// client that forgot the key is not told, and its retry after a lost
	// answer moves the money again.
	KindNoKey = "no-key"
	// KindReorderedRefused: a retry with the same JSON members in another
	// order (the same request in other bytes) was refused as a reuse of
	// its key: the key is bound to the body's bytes, not to the request,
	// so a client whose JSON library orders members otherwise is told its
	// transfer can never be made, whatever became of it.
	KindReorderedRefused = "reordered-body-refused"
)

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
		id := t.toldID(a)
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
		// A transfer made for the request without the key moved the money
		// too (no-key names it).
		if in.Keyless != nil {
			if id := t.toldID(*in.Keyless); id != "" && !seen[id] {
				seen[id] = true
				rows = append(rows, bank.TransferRow{ID: int64(len(rows) + 1), From: in.Request.From, To: in.Request.To, AmountKobo: in.Request.AmountKobo, Intent: in.Label + " (no key)"})
			}
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
	c.targetCrossUser()
	c.targetKeyless()
	c.targetReordered()
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
		if in.Reuse == ReuseUser {
			continue // targetCrossUser's
		}
		amount := in.Request.AmountKobo
		last := c.end()
		if n := len(in.Attempts); n > 0 {
			last = in.Attempts[n-1].EndNs
		}
		ids := t.receipts(in)
		if lost := t.lostAtRestart(c.h, in); lost != "" {
			c.add(Violation{Kind: KindKeyLostRestart, Intent: in.Index, AtNs: last, Kobo: int64(len(ids)-1) * amount, Detail: lost})
		} else if len(ids) > 1 {
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
			if a.Seen == SeenUnknown || t.reorderRefused(*a) {
				continue // reordered-body-refused's: the bytes were refused, not the request
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
			kind, detail := t.unresolved(in)
			c.add(Violation{Kind: kind, Intent: in.Index, AtNs: last, Kobo: amount, Detail: detail})
		}
	}
}

// lostAtRestart says, when in was told a transfer before a restart of the
// target and another transfer when its key was sent after it, what the
// restart lost; "" otherwise.
func (t *Target) lostAtRestart(h *History, in *Intent) string {
	for _, r := range h.Restarts {
		before, after := "", ""
		for _, a := range in.Attempts {
			id := t.toldID(a)
			switch {
			case id == "":
			case a.EndNs <= r.AtNs && before == "":
				before = id
			case a.StartNs >= r.EndNs && before != "" && id != before && after == "":
				after = id
			}
		}
		if after != "" {
			return fmt.Sprintf("%s (%s) was told transfer %s before the target restarted (--restart %q at %s), and its key, sent again after the restart, made transfer %s: the keys were lost with the process (kept in its memory, not in the database), so a retry after a redeploy or a crash moves the money again",
				in.Label, t.describe(in), before, t.RestartCommand, time.Duration(r.AtNs).Round(time.Millisecond), after)
		}
	}
	return ""
}

// unresolved names an intent without a final answer after healing: with a
// database fault proxy, a 5xx to every retry is a server error stored as
// the key's answer, and a 409 past the lock a key the failure left
// claimed; otherwise (or when the answers were of no such kind) it is
// unresolved.
func (t *Target) unresolved(in *Intent) (string, string) {
	plain := fmt.Sprintf("%s still has no final answer after healing (%d attempts, the last %s): a key left in progress with nobody working on it answers 409 for ever", in.Label, len(in.Attempts), lastSeen(in))
	if t.DBListen == "" {
		return KindUnresolved, plain
	}
	// The healing attempts that were answered, in a row at the end.
	var run []Attempt
	for k := len(in.Attempts) - 1; k >= 0; k-- {
		a := in.Attempts[k]
		if a.Phase != PhaseHeal || a.Status == 0 {
			break
		}
		run = append([]Attempt{a}, run...)
	}
	if len(run) < 2 {
		return KindUnresolved, plain
	}
	first, last := run[0], run[len(run)-1]
	span := time.Duration(last.EndNs - first.StartNs).Round(time.Millisecond)
	same := func(st func(int) bool) bool {
		return !slices.ContainsFunc(run, func(a Attempt) bool { return !st(a.Status) })
	}
	switch {
	case same(func(s int) bool { return s >= 500 }):
		return KindServerError, fmt.Sprintf("%s: every one of its last %d retries with the same key, over %s after the database faults healed, was answered %s: a server error was stored as the key's final answer, so a passing database failure became a permanent one and the intent never completes",
			in.Label, len(run), span, t.answer(last))
	case same(func(s int) bool { return s == 409 }) && span > t.Settle+t.LockTTL:
		ttl := "--lock-ttl " + t.LockTTL.String()
		if t.LockTTL == 0 {
			ttl = "--lock-ttl (none given)"
		}
		return KindLockPastTTL, fmt.Sprintf("%s: every one of its last %d retries with the same key was told 409 (in progress) for %s, past %s and --settle %s: a database failure left the key claimed, and the intent cannot complete",
			in.Label, len(run), span, ttl, t.Settle)
	}
	return KindUnresolved, plain
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
		if t.lostAtRestart(c.h, in) != "" {
			continue // key-lost-on-restart's: the answer after the restart differs because the key was forgotten
		}
		var first *Attempt
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown || t.reorderRefused(*a) {
				continue // a refusal of the bytes is reordered-body-refused's
			}
			if first == nil {
				first = a
				continue
			}
			fa, aa := t.answer(*first), t.answer(*a)
			if first.Seen == SeenRejected && aa.Receipt() {
				when := ""
				if a.Phase == PhaseAfterFunds {
					when = ", sent again after money arrived in the payer's account"
				}
				c.add(Violation{Kind: KindRefusedMoved, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
					Detail: fmt.Sprintf("%s (%s) was refused %s (attempt %d), then its key%s made transfer %s (attempt %d, %s): the refusal was not stored as the key's answer, so a client told \"refused\" had %s moved by a late retry or a duplicate",
						in.Label, t.describe(in), fa, first.N, when, aa.TransferID, a.N, a.Phase, probe.Kobo(in.Request.AmountKobo))})
				continue
			}
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

// targetCrossUser checks the intents in which another user sent the first
// user's key and exact body (ReuseUser): the answer must be the refusal a
// key of their own gets (the account is not theirs), never the first
// user's stored transfer, a transfer of its own, a success, or a refusal of
// the key (which tells them the key exists). An answer the proxy dropped
// counts too: the target sent it.
func (c *checker) targetCrossUser() {
	t := c.h.Config.Target
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		if in.Reuse != ReuseUser || in.ReuseOf < 0 || in.ReuseOf >= len(c.h.Intents) {
			continue
		}
		first := &c.h.Intents[in.ReuseOf]
		theirs := t.receipts(first)
		who := fmt.Sprintf("%s (%s with %s's key and exact body, from %s's account %s)", in.Label, t.user(in.UserID).Name,
			t.user(first.UserID).Name, t.user(first.UserID).Name, t.account(in.Request.From))
		for _, a := range in.Attempts {
			ans := t.answer(a)
			dropped := ""
			if id := t.lostID(a); id != "" {
				ans = t.Contract.Read(a.Lost.Status, nil, a.Lost.Body)
				dropped = " (the proxy dropped it on its way: the target sent it)"
			} else if a.Seen == SeenUnknown {
				continue
			}
			var what string
			switch {
			case ans.Receipt() && contains(theirs, ans.TransferID):
				what = fmt.Sprintf("was answered with %s's stored answer %s%s: it leaks transfer %s", t.user(first.UserID).Name, ans, dropped, ans.TransferID)
				if ans.Balance != nil {
					what += fmt.Sprintf(" and the balance %s of account %s", probe.Kobo(*ans.Balance), t.account(first.Request.From))
				}
				what += fmt.Sprintf(", of an account %s may not touch: stored answers are found by the key text alone, not by user", t.user(in.UserID).Name)
			case ans.Receipt():
				what = fmt.Sprintf("made transfer %s%s: %s moved money out of an account that is not theirs", ans.TransferID, dropped, t.user(in.UserID).Name)
			case ans.OK():
				what = fmt.Sprintf("was answered %s%s: a success for a request that must be refused", ans, dropped)
			case ans.Class == judge.KeyRefusal:
				what = fmt.Sprintf("was answered %s, a refusal of the key: a key of %s's own gets no such answer, so it tells them %s's key exists (the lesson refuses the account: 404)",
					ans, t.user(in.UserID).Name, t.user(first.UserID).Name)
			default:
				continue
			}
			c.add(Violation{Kind: KindCrossUser, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo, Detail: fmt.Sprintf("%s %s (attempt %d)", who, what, a.N)})
			break
		}
	}
}

// targetKeyless judges each request sent without its key (Intent.Keyless)
// as probe's no-key check does (probe.JudgeRefusal): refused, or a
// violation. The intent's own key is not involved: its attempts are judged
// by the other rules, this request by this one alone.
func (c *checker) targetKeyless() {
	t := c.h.Config.Target
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		a := in.Keyless
		if a == nil || a.Status == 0 {
			continue // no answer: nothing to judge
		}
		ans := t.answer(*a)
		var what string
		switch probe.JudgeRefusal(ans) {
		case probe.Made:
			what = fmt.Sprintf("made transfer %s: a transfer without a key was made, so its retry after a lost answer cannot be recognised, and moves the money again", ans.TransferID)
		case probe.Succeeded:
			what = fmt.Sprintf("was answered %s: a success", ans)
		case probe.Failed:
			what = fmt.Sprintf("was answered %s: a server error, not a refusal", ans)
		default:
			continue
		}
		c.add(Violation{Kind: KindNoKey, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
			Detail: fmt.Sprintf("%s (%s), sent without its key (no %s header), %s (the lesson refuses it: 400 idempotency_key_required)", in.Label, t.describe(in), t.Contract.KeyHeader, what)})
	}
}

// keylessRefused reports whether in's request without its key was sent,
// answered and refused (the path refused-no-key).
func (t *Target) keylessRefused(in *Intent) bool {
	return in.Keyless != nil && in.Keyless.Status != 0 && probe.JudgeRefusal(t.answer(*in.Keyless)) == probe.Refused
}

// reorderRefused reports whether a, a retry with the body's members in
// another order (Attempt.Reordered), was refused as a reuse of its key.
func (t *Target) reorderRefused(a Attempt) bool { return a.Reordered && t.refusedAsReused(a) }

// targetReordered checks the retries sent with the body's members in
// another order: the same request, so the key's first answer is theirs,
// never a refusal of the key.
func (c *checker) targetReordered() {
	t := c.h.Config.Target
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		if in.Reuse != "" {
			continue
		}
		for _, a := range in.Attempts {
			if !t.reorderRefused(a) {
				continue
			}
			made := ""
			if ids := t.receipts(in); len(ids) > 0 {
				made = fmt.Sprintf(", while transfer %s made for it stands", strings.Join(ids, ", "))
			}
			c.add(Violation{Kind: KindReorderedRefused, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
				Detail: fmt.Sprintf("%s (%s) sent its key again with the same request, its JSON members in another order (attempt %d, %s), and was answered %s, a refusal of the key: "+
					"the key is bound to the body's bytes, not to the request, so a client whose JSON library orders members otherwise is told its transfer can never be made%s",
					in.Label, t.describe(in), a.N, a.Phase, t.answer(a), made)})
			break
		}
	}
}

// describe says who asked what, in the target's names.
func (t *Target) describe(in *Intent) string {
	tr := t.transfer(in.Request)
	s := fmt.Sprintf("%s sends %s from account %s to %s", t.user(in.UserID).Name, probe.Kobo(tr.Amount), tr.From, tr.To)
	switch in.Reuse {
	case "":
	case ReuseUser:
		s += fmt.Sprintf(", with intent-%d's key and exact body (another user's)", in.ReuseOf)
	default:
		s += fmt.Sprintf(", reusing intent-%d's key with another %s", in.ReuseOf, in.Reuse)
	}
	return s
}

// checkKinds are the rules a target's history is checked by: the answers'
// always, the money's with a balance source.
func (t *Target) checkKinds(h *History) []string {
	kinds := []string{KindTwice, KindAckMissing, KindWrong, KindReplay, KindUnresolved, KindCrossUser, KindRefusedMoved, KindNoKey, KindReorderedRefused}
	if t.DBListen != "" {
		kinds = append(kinds, KindServerError, KindLockPastTTL)
	}
	if t.RestartCommand != "" {
		kinds = append(kinds, KindKeyLostRestart)
	}
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
		out = append(out, Unchecked{KindRefusedMoved + " (after money arrived)", "no balance source: the run cannot ask for just more than an account holds, so no intent is refused for funds and sent again after money arrives " +
			"(a key refused and later answered with a transfer is still caught); give --balances-url TEMPLATE or --database-url URL with --balances-sql QUERY"})
	} else if !audits {
		out = append(out, Unchecked{KindTotal, "checked before and after the run only: the balance source reads one account after another, so it cannot audit while transfers run (a --balances-sql source reads one snapshot, and does)"})
	}
	out = append(out,
		Unchecked{KindRejected, "the target's transfers are not labelled with their intents: a refused intent that moved money shows only as balances that do not add up (" + KindLedger + ")"},
		Unchecked{KindFrozen, "the contract gives no way to freeze an account, and no fault freezes one"},
		Unchecked{KindAbandoned, "the target's key store cannot be read: a key left in progress shows only as an intent still told 409 after healing (" + KindUnresolved + ")"},
		Unchecked{KindUnresolved + " (keys in progress)", "the target's key store cannot be read: a key left in progress at the end shows only through its intent, unsettled"},
		Unchecked{KindKeyLost, "the target's cleanup job cannot be run from outside"},
		Unchecked{"side effects", "SMS, events, the outbox and its dispatchers are not part of the transfer contract"},
	)
	if !t.Contract.ExactReplays {
		out = append(out, Unchecked{KindReplay + " (bytes)", "replays are compared by status and transfer id only: the target does not promise byte-for-byte replays (--exact-replays)"})
	}
	given := t.Given
	if t.DBListen != "" {
		given = append(slices.Clip(given), probe.FlagDBProxy)
	}
	if t.RestartCommand != "" {
		given = append(slices.Clip(given), probe.FlagRestart)
	}
	for _, u := range probe.Outside(len(t.URLs), "a second --target URL", given) {
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
	case PathReplay, PathReplayAfterFinal, PathConcurrentCopy, PathHealed, PathReuseRecipient, PathReuseAmount, PathSharedKey, PathCrossing, PathCrossUser,
		PathNoKey, PathReordered:
		return true
	case PathRefusedMoved:
		return t.BalancesFrom != "" // the refusal for funds needs the payer's balance
	case PathDBSettled:
		return t.DBListen != ""
	case PathAcrossRestart:
		return t.RestartCommand != ""
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
