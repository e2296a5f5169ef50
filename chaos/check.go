package chaos

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/outbox"
)

// Violation kinds, one per check.
const (
	KindTotal      = "total-not-conserved"    // an audit or the end saw another total
	KindNegative   = "negative-balance"       // a balance below zero
	KindTwice      = "moved-twice"            // one intent, more than one transfer
	KindAckMissing = "acknowledged-missing"   // told 201, but that transfer is not its own, once
	KindRejected   = "rejected-but-moved"     // told a final refusal, but money moved
	KindWrong      = "wrong-answer"           // a final answer the lesson's rules do not allow for that request
	KindFrozen     = "frozen-debited"         // an account frozen after the transfer's checks was debited anyway
	KindReplay     = "replay-differs"         // a later answer to a key is not the first one, replayed byte for byte
	KindAbandoned  = "key-abandoned"          // before healing, a key in progress whose holder had returned
	KindUnresolved = "unresolved"             // an intent still unknown after healing, or a key no attempt settled still in progress at the end
	KindLedger     = "balance-ledger-differs" // a balance is not opening + credits − debits
	KindKeyLost    = "key-lost"               // a key that gave a final answer is not completed at the end

	// The side effects' (outbox.Snapshot), judged after healing.
	KindSMSNotOnce    = "sms-not-once"             // a committed transfer without exactly one SMS
	KindGhostEffect   = "sms-or-event-for-nothing" // an SMS, event or outbox row for a transfer that does not exist
	KindOutboxLeft    = "outbox-row-left"          // an outbox row not done after healing
	KindClaimOverlap  = "outbox-claim-overlap"     // two dispatchers held one row at once
	KindEventLost     = "event-lost"               // a committed transfer with no event, or an event never applied
	KindEffectTwice   = "effect-applied-twice"     // one event, more than one consumer effect
	KindLockTwoHolder = "lock-two-holders"         // the lock outside the database granted while another held it
)

// sideEffectKinds maps each side-effect invariant to its violation kind.
var sideEffectKinds = map[string]string{
	outbox.InvOneSMS:      KindSMSNotOnce,
	outbox.InvNoGhost:     KindGhostEffect,
	outbox.InvOutboxDone:  KindOutboxLeft,
	outbox.InvOneClaim:    KindClaimOverlap,
	outbox.InvNoEventLost: KindEventLost,
	outbox.InvEffectOnce:  KindEffectTwice,
	outbox.InvOneHolder:   KindLockTwoHolder,
}

// Kinds lists every violation kind in the order Check reports them.
func Kinds() []string {
	return []string{KindTotal, KindNegative, KindTwice, KindAckMissing, KindRejected, KindWrong, KindFrozen, KindReplay,
		KindAbandoned, KindUnresolved, KindLedger, KindKeyLost,
		KindSMSNotOnce, KindGhostEffect, KindOutboxLeft, KindClaimOverlap, KindEventLost, KindEffectTwice, KindLockTwoHolder}
}

// CheckTitle is what the check of a violation kind verifies, in words.
func CheckTitle(kind string) string {
	if inv, ok := SideEffectInvariant(kind); ok {
		return inv
	}
	switch kind {
	case KindTotal:
		return "total money conserved at every audit and at the end"
	case KindNegative:
		return "no negative balance"
	case KindTwice:
		return "no intent moved money more than once"
	case KindAckMissing:
		return "every acknowledged transfer exists, once, as asked"
	case KindRejected:
		return "no refused intent moved money"
	case KindWrong:
		return "every final answer is one the lesson's rules allow for that request"
	case KindFrozen:
		return "no account frozen under a transfer was debited by it"
	case KindReplay:
		return "every later answer to a key is its first, replayed byte for byte"
	case KindAbandoned:
		return "no key in progress without a live holder before healing"
	case KindUnresolved:
		return "every intent settled after healing, and no key left in progress at the end"
	case KindLedger:
		return "each balance is opening + credits − debits"
	case KindKeyLost:
		return "every key that gave a final answer is still completed at the end"
	case KindKeyLostRestart:
		return "a key answered before the target restarted is replayed after it, never made again"
	case KindServerError:
		return "no key keeps answering a server error once the database has healed"
	case KindLockPastTTL:
		return "no key left claimed (409) past the target's lock after a database failure"
	case KindRefusedMoved:
		return "a key answered with a refusal is refused again, even after money arrived, never made a transfer"
	case KindCrossUser:
		return "another user with a user's key and exact body is refused, and learns nothing of the key"
	case KindNoKey:
		return "a transfer request without a key is refused, never made a transfer, answered 2xx or failed 5xx"
	case KindReorderedRefused:
		return "a retry with the same members in another order is answered as the first, never refused as key reuse"
	}
	return kind
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
	// Coverage is what the run exercised: a run with no violation proves
	// only what it exercised.
	Coverage Coverage `json:"coverage"`
	// Unchecked are the rules a run against someone else's server
	// (Config.Target) could not check with what the target exposes.
	Unchecked []Unchecked `json:"unchecked,omitempty"`
	// PrimaryChanges are the history's changes of primary, measured: the
	// unavailability and the violations that cross each.
	PrimaryChanges []PrimaryChangeResult `json:"primaryChanges,omitempty"`
	// WorkerErrors are the history's (see Coverage.Unexplained).
	WorkerErrors *WorkerErrors `json:"workerErrors,omitempty"`
}

// Verdicts of a run.
const (
	// Valid: no violation, and every defence path taken, every fault fired.
	Valid = "VALID"
	// Invalid: a rule was broken.
	Invalid = "INVALID"
	// Inconclusive: no violation, but some defence was never exercised, so
	// the run cannot vouch for it.
	Inconclusive = "INCONCLUSIVE"
)

// Verdict is VALID, INVALID or INCONCLUSIVE.
func (r Result) Verdict() string {
	switch {
	case len(r.Violations) > 0:
		return Invalid
	case !r.Coverage.Complete():
		return Inconclusive
	}
	return Valid
}

// CheckSummary is one check and how often it failed.
type CheckSummary struct {
	Kind       string `json:"kind"`
	Violations int    `json:"violations"`
}

// Valid reports whether the history broke nothing. Whether it exercised
// enough to vouch for anything is Verdict's question.
func (r Result) Valid() bool { return len(r.Violations) == 0 }

// Check verifies a history: it reads only the history, never the database,
// and runs in time linear in the history's length (intents, attempts,
// audits × accounts, transfers).
func Check(h *History) Result { return CheckWithout(h, nil) }

// CheckWithout is Check with the rules off (kinds) switched off: their
// violations are not reported and they are not listed as checked. The audit
// uses it to show what each rule alone catches.
func CheckWithout(h *History, off []string) Result {
	var skip map[string]bool
	for _, k := range off {
		if skip == nil {
			skip = map[string]bool{}
		}
		skip[k] = true
	}
	if h.Config.Target != nil {
		return checkTarget(h, skip)
	}
	c := checker{h: h, f: newFacts(h), res: Result{ByKind: map[string]int{}}, off: skip, stuck: map[string]bool{}, named: map[string]bool{}}
	for _, k := range h.StuckKeys {
		c.stuck[k] = true
	}
	c.money()
	c.intents()
	c.freezes()
	c.replays()
	c.keys()
	c.keysKept()
	c.stuckKeys()
	c.sideEffects()
	c.finish()
	c.res.PrimaryChanges = primaryChanges(h, c.res.Violations)
	c.res.WorkerErrors = h.WorkerErrors
	return c.res
}

type checker struct {
	h   *History
	f   *facts
	res Result
	// off are the rules switched off (CheckWithout).
	off map[string]bool
	// stuck are the keys still in progress at the end (History.StuckKeys),
	// as user/key; named are those a key-lost or unresolved violation of an
	// intent that sent them already names, switched off or not, so that
	// stuckKeys reports only the others, and switching key-lost off never
	// makes unresolved catch what key-lost alone would.
	stuck, named map[string]bool
}

func (c *checker) add(v Violation) {
	if c.off[v.Kind] {
		return
	}
	c.res.Violations = append(c.res.Violations, v)
	c.res.ByKind[v.Kind]++
}

func (c *checker) end() int64 {
	if d := c.h.Deterministic; d != nil {
		return int64(d.Steps)
	}
	return int64(c.h.Duration)
}

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
				Detail: fmt.Sprintf("audit %d at %s: total %s, expected %s", n+1, at(c.h, a.AtNs), bank.Naira(got), bank.Naira(want))})
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
	settled := make(map[int]bool, len(c.h.Intents))
	for _, in := range c.h.Intents {
		settled[in.Index] = in.Outcome != SeenUnknown
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
		x := c.f.expect(in)
		// A reuse of a key whose first request never had a final answer
		// (unresolved, itself a violation): a server may have released
		// that key after failing it, and then answers the reuse as a
		// request of its own, as the correct handler does.
		var own *expectation
		if in.Reuse != "" && !settled[in.ReuseOf] {
			alone := *in
			alone.Reuse = ""
			y := c.f.expect(&alone)
			own = &y
		}
		sawOK, sawRejected, wrong := false, false, false
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown {
				continue
			}
			resp := a.Response()
			ok, allowed := x.allows(in, resp)
			if !ok && own != nil {
				var also string
				if ok, also = own.allows(in, resp); !ok {
					allowed += ", or, its first request never having had a final answer, " + strings.TrimPrefix(also, "only ")
				}
			}
			if !ok && c.frozenMeanwhile(in, a, resp) {
				ok = true
			}
			if !ok && !wrong {
				wrong = true
				c.add(Violation{Kind: KindWrong, Intent: in.Index, AtNs: a.EndNs, Kobo: amount,
					Detail: fmt.Sprintf("%s was told %s (attempt %d); the lesson's rules allow %s", c.f.describe(in), resp.Summary(), a.N, allowed)})
			}
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
		}
		if sawRejected && !sawOK && len(rows) > 0 {
			c.add(Violation{Kind: KindRejected, Intent: in.Index, AtNs: last, Kobo: amount,
				Detail: fmt.Sprintf("%s was told it was refused, but it moved money (transfers %s)", in.Label, transferIDs(rows))})
		}
		if in.Outcome == SeenUnknown {
			c.add(Violation{Kind: KindUnresolved, Intent: in.Index, AtNs: last, Kobo: amount,
				Detail: fmt.Sprintf("%s still has no final answer after healing (%d attempts, the last %s)%s", in.Label, len(in.Attempts), lastSeen(in), c.nameStuck(in, ""))})
		}
	}
}

// frozenMeanwhile reports whether resp, attempt a's answer to in, is the
// refusal of an account that a freeze recorded in the history made
// inactive while the answer was being made: between in's first attempt and
// the first final answer of a's key (a later one replays it). Statuses stay
// as they opened unless a transfer failed to hold its sender's row against
// the freeze fault (frozen-debited); the intents refused meanwhile were told
// the truth.
func (c *checker) frozenMeanwhile(in *Intent, a *Attempt, resp bank.Response) bool {
	if len(c.h.Freezes) == 0 || resp.Status != 422 || len(in.Attempts) == 0 {
		return false
	}
	var account int64
	switch resp.Code() {
	case bank.CodeAccountNotActive:
		account = in.Request.From
	case bank.CodeRecipientUnavailable:
		account = in.Request.To
	default:
		return false
	}
	from, to := in.Attempts[0].StartNs, a.EndNs
	for k := range in.Attempts {
		if b := &in.Attempts[k]; b.Seen != SeenUnknown && b.Key == a.Key {
			to = b.EndNs
			break
		}
	}
	for _, f := range c.h.Freezes {
		thaw := f.ThawNs
		if thaw == 0 {
			thaw = c.end()
		}
		if f.Account == account && f.AtNs <= to && thaw >= from {
			return true
		}
	}
	return false
}

// freezes checks that no account frozen under a transfer, after its checks
// and before its debit, was debited by it: the transfer's row lock must make
// the freeze wait until the transfer is done.
func (c *checker) freezes() {
	for _, f := range c.h.Freezes {
		for _, t := range c.h.Final.Transfers {
			if t.Intent == f.Intent && t.From == f.Account {
				idx := -1
				for k := range c.h.Intents {
					if c.h.Intents[k].Label == f.Intent {
						idx = c.h.Intents[k].Index
					}
				}
				c.add(Violation{Kind: KindFrozen, Intent: idx, AtNs: f.AtNs, Kobo: t.AmountKobo,
					Detail: fmt.Sprintf("account %d was frozen while %s stood between its checks and its debit, and transfer %d debited it anyway: the account's row was not locked", f.Account, f.Intent, t.ID)})
			}
		}
	}
}

// replays checks that every key answers one way: the first final answer a
// client got for a key (its user's, as the lesson scopes keys) is the only
// one the server produced, and every later final answer is that one
// replayed, byte for byte. A retry, a user tapping again after the final
// answer, and a retry after the cleanup job ran all fall under it. A key
// reused for another request is the exception: the key's stored answer
// belongs to the first request, and each reuse is refused afresh (the
// wrong-answer check holds it to 422).
func (c *checker) replays() {
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		if in.Reuse != "" {
			continue
		}
		first := map[string]*Attempt{}
		for k := range in.Attempts {
			a := &in.Attempts[k]
			if a.Seen == SeenUnknown {
				continue
			}
			o, seen := first[a.Key]
			if !seen {
				first[a.Key] = a
				continue
			}
			var why string
			switch {
			case !a.Replayed:
				why = "it was not a replay: the request ran again"
			case a.Status != o.Status:
				why = fmt.Sprintf("the status differs (%d, then %d)", o.Status, a.Status)
			case !sameBytes(*o, *a):
				why = fmt.Sprintf("the bytes differ: %s, then %s", quote(o.Bytes()), quote(a.Bytes()))
			default:
				continue
			}
			c.add(Violation{Kind: KindReplay, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
				Detail: fmt.Sprintf("%s: attempt %d (%s) answered %s, but attempt %d answered %s; %s",
					in.Label, a.N, a.Phase, a.Response().Summary(), o.N, o.Response().Summary(), why)})
		}
	}
}

// sameBytes compares two answers' bodies as the client received them. A
// GET /transfers?key= lookup (HTTP healing) is read through the client's
// Resolve, which keeps only the bank's form of a body, so it is compared on
// that form.
func sameBytes(a, b Attempt) bool {
	if a.Lookup || b.Lookup {
		return bytes.Equal(a.Body, b.Body)
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}

// intentOfKey is the (first) intent that sent userKey ("user/key"), and
// its index; nil and -1 when none did.
func (c *checker) intentOfKey(userKey string) (*Intent, int) {
	for i := range c.h.Intents {
		in := &c.h.Intents[i]
		for _, a := range in.Attempts {
			if fmt.Sprintf("%d/%s", in.UserID, a.Key) == userKey {
				return in, in.Index
			}
		}
	}
	return nil, -1
}

// quote shows a body for a violation, cut at 120 bytes.
func quote(b []byte) string {
	if len(b) > 120 {
		return fmt.Sprintf("%q…", b[:120])
	}
	return fmt.Sprintf("%q", b)
}

// lostTheDatabase says whether the run's clients lost the database for a
// while: a crash of PostgreSQL, a partition, or a change of primary (a
// failover on a team's cluster, seen by the watcher).
func (c *checker) lostTheDatabase() bool {
	return len(c.h.Crashes) > 0 || len(c.h.Partitions) > 0 || len(c.h.PrimaryChanges) > 0
}

func (c *checker) keys() {
	if b := c.h.BeforeHeal; b != nil && !c.lostTheDatabase() {
		live := make(map[string]bool, len(b.LiveLocks))
		for _, l := range b.LiveLocks {
			live[l] = true
		}
		for _, k := range b.InProgress {
			if !live[k.LockID] {
				_, idx := c.intentOfKey(k.Key)
				c.add(Violation{Kind: KindAbandoned, Intent: idx, AtNs: c.end(),
					Detail: fmt.Sprintf("key %s was in progress (lock %s) before healing, but its holder had returned: every retry is told 409 until the lock expires", k.Key, k.LockID)})
			}
		}
	}
}

// nameStuck names, for a key-lost or unresolved violation of in, the keys
// in's attempts sent that are still in progress at the end, but for skip
// (user/key, which the violation names itself), and marks them named.
func (c *checker) nameStuck(in *Intent, skip string) string {
	var out []string
	for _, a := range in.Attempts {
		k := fmt.Sprintf("%d/%s", in.UserID, a.Key)
		if !c.stuck[k] || slices.Contains(out, k) {
			continue
		}
		c.named[k] = true
		if k != skip {
			out = append(out, k)
		}
	}
	switch len(out) {
	case 0:
		return ""
	case 1:
		return "; its key " + out[0] + " is still in progress at the end"
	}
	return "; its keys " + strings.Join(out, " ") + " are still in progress at the end"
}

// stuckKeys reports a key still in progress at the end that no key-lost or
// unresolved violation names: one no intent sent (a hand-made history), or
// one whose intent had its final answer with another key (a client that
// changes keys between attempts). In bank-sim's own runs a key in progress
// at the end is an intent's: either some attempt had a final answer with
// it, and the key is not completed (key-lost), or none did, and its intent,
// retried with that key by healing after the clock moved past every lock,
// never settled (unresolved). Such a key holds no money of its own, so the
// violation weighs none.
func (c *checker) stuckKeys() {
	for _, k := range c.h.StuckKeys {
		if c.named[k] {
			continue
		}
		in, idx := c.intentOfKey(k)
		detail := fmt.Sprintf("key %s is still in progress at the end, and no intent sent it", k)
		if in != nil {
			detail = fmt.Sprintf("key %s is still in progress at the end, and no attempt settled it", k)
			for _, a := range in.Attempts {
				if a.Seen != SeenUnknown {
					detail += fmt.Sprintf(" (%s sent it, and had its final answer with key %s)", in.Label, a.Key)
					break
				}
			}
		}
		c.add(Violation{Kind: KindUnresolved, Intent: idx, AtNs: c.end(), Detail: detail})
	}
}

// keysKept checks that the key of every final answer is completed at the
// end: the answer was stored with the work, and neither a crash of
// PostgreSQL, nor a late server's release, nor the cleanup job (which runs
// before the end, when every key is younger than the retention) lost it. A
// retry of any of them is still a replay.
func (c *checker) keysKept() {
	have := make(map[string]bool, len(c.h.CompletedKeys))
	for _, k := range c.h.CompletedKeys {
		have[k] = true
	}
	for idx := range c.h.Intents {
		in := &c.h.Intents[idx]
		for _, a := range in.Attempts {
			if a.Seen == SeenUnknown {
				continue
			}
			if k := fmt.Sprintf("%d/%s", in.UserID, a.Key); !have[k] {
				state := "that key is not completed"
				if c.stuck[k] {
					state = "key " + k + " is still in progress, not completed"
				}
				after := ""
				switch {
				case len(c.h.Crashes) > 0 && c.h.Config.Failover != "":
					after = " (the primary was killed and its standby promoted during the run)"
				case len(c.h.Crashes) > 0:
					after = " (PostgreSQL was killed during the run)"
				case len(c.h.PrimaryChanges) > 0:
					pc := c.h.PrimaryChanges[0]
					after = fmt.Sprintf(" (the primary changed from %s to %s during the run)", pc.From, pc.To)
				}
				c.add(Violation{Kind: KindKeyLost, Intent: in.Index, AtNs: a.EndNs, Kobo: in.Request.AmountKobo,
					Detail: fmt.Sprintf("%s was told %s (attempt %d, key %s), but at the end %s%s%s", in.Label, a.Response().Summary(), a.N, a.Key, state, after, c.nameStuck(in, k))})
				break
			}
		}
	}
}

// sideEffects judges what the transfers caused beyond the database, as the
// history recorded it after healing (a history from before the side effects
// were recorded has none, and is not judged on them).
func (c *checker) sideEffects() {
	if c.h.SideEffects == nil {
		return
	}
	for _, chk := range c.h.SideEffects.Check() {
		if kind, ok := sideEffectKinds[chk.Name]; ok && !chk.OK {
			c.add(Violation{Kind: kind, Intent: -1, AtNs: c.end(), Detail: chk.Name + ": " + chk.Detail})
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
	judged := map[string]bool{} // the side effects' invariants this history was judged on
	if c.h.SideEffects != nil {
		for _, chk := range c.h.SideEffects.Check() {
			judged[chk.Name] = true
		}
	}
	kinds := Kinds()
	if t := c.h.Config.Target; t != nil {
		kinds = t.checkKinds(c.h)
	}
	for _, k := range kinds {
		if c.off[k] {
			continue
		}
		if inv, side := SideEffectInvariant(k); side && !judged[inv] {
			continue // not recorded (an older history), or not run (no lock over HTTP)
		}
		if k == KindAbandoned && (c.h.BeforeHeal == nil || c.lostTheDatabase()) {
			// Not checked across a crash of PostgreSQL, a partition or a
			// change of primary: a holder whose release could not reach the
			// database leaves its key to lock expiry, the defence for that
			// case.
			continue
		}
		c.res.Checks = append(c.res.Checks, CheckSummary{Kind: k, Violations: c.res.ByKind[k]})
	}
	c.res.Stats = Summarize(c.h)
	c.res.Coverage = Cover(c.h)
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
	if t := h.Config.Target; t != nil {
		lines[0] = fmt.Sprintf("%s: %s, key %s", in.Label, t.describe(&in), in.Key)
		if a := in.Keyless; a != nil {
			what := a.Error
			if a.Status != 0 {
				what = a.Response().Summary()
			}
			lines = append(lines, fmt.Sprintf("  %9s  sent without its key (server %d): %s → %s", at(h, a.StartNs), a.Instance+1, what, a.Seen))
		}
	} else if in.Reuse != "" {
		lines[0] += fmt.Sprintf(" (a buggy client reusing intent-%d's key with another %s)", in.ReuseOf, in.Reuse)
	}
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
		if a.Reordered {
			key += ", members reordered"
		}
		lines = append(lines, fmt.Sprintf("  %9s  attempt %d (%s, server %d, %s%s): %s → %s",
			at(h, a.StartNs), a.N, a.Phase, a.Instance+1, fault, key, what, a.Seen))
	}
	lines = append(lines, "  outcome: "+in.Outcome)
	return lines
}

// at shows an offset of h: a time, or in a deterministic history a step.
func at(h *History, offset int64) string {
	if h.Deterministic != nil {
		return fmt.Sprintf("step %d", offset)
	}
	return time.Duration(offset).Round(time.Microsecond).String()
}

// SideEffectInvariant returns the side effects' invariant that violation
// kind k stands for, if it is one of theirs.
func SideEffectInvariant(k string) (string, bool) {
	for inv, kind := range sideEffectKinds {
		if kind == k {
			return inv, true
		}
	}
	return "", false
}
