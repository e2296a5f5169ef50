package chaos

import (
	"fmt"
	"slices"
	"sort"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

// Defence paths: the ways a correct handler can be made to defend the bank.
// A run that never took one of them proved nothing about it, so it is
// INCONCLUSIVE, not VALID. The first group is counted inside the servers
// (History.Server), the rest from what clients were told.
const (
	PathTakeover        = "takeover"          // a key whose lock expired was taken over
	PathExpiredMidWrite = "expired-mid-write" // … while its holder was still writing
	PathFencing         = "fencing-rollback"  // a late holder's completion failed the fencing check and rolled back
	PathWoken           = "late-server-woken" // a server stopped after claiming its key was woken and tried to finish
	PathTxRetry         = "deadlock-retry"    // InTx ran a transaction again after a deadlock
	PathWaited          = "wait-then-replay"  // the wait policy waited for a key in progress, then replayed it
	// PathDisconnectFinished: the client went away mid-request and the
	// server finished its work anyway.
	PathDisconnectFinished = "disconnect-finished"
	// PathFreezeWaited: a freeze of a sender's account had to wait for the
	// transfer that held its row.
	PathFreezeWaited = "freeze-waited"

	PathReplay             = "replay"               // a retry was answered with the stored answer
	PathReplayAfterFinal   = "replay-after-final"   // … a repeat after the final answer
	PathReplayAfterCleanup = "replay-after-cleanup" // … a repeat after the cleanup job ran
	PathConflict           = "conflict-409"         // 409 while another request held the key
	PathHealed             = "healed"               // an unknown outcome was resolved by healing
	PathReuseRecipient     = "key-reused-recipient" // 422 for a key reused with another recipient
	PathReuseSender        = "key-reused-sender"    // … with another sender account
	PathReuseAmount        = "key-reused-amount"    // … with another amount
	PathSharedKey          = "shared-key"           // two users, one key text, each answered for their own request
	PathExactBalance       = "exact-balance"        // a transfer of exactly the balance went through, leaving ₦0
	PathOverBalance        = "over-balance"         // one kobo more than the balance was refused
	PathInsufficient       = "insufficient-funds"   // 422 insufficient_funds
	PathNotOwner           = "refused-not-owner"    // 404 for another user's account
	PathFrozenSender       = "refused-frozen-sender"
	PathClosedSender       = "refused-closed-sender"
	PathFrozenRecipient    = "refused-frozen-recipient"
	PathClosedRecipient    = "refused-closed-recipient"
	PathMissingRecipient   = "refused-missing-recipient"
	PathSameAccount        = "refused-same-account"
	PathCrossing           = "crossing" // two transfers between the same accounts, opposite ways, at the same time
	// PathCrossUser: another user sent a key that has a transfer, with its
	// exact body, and was answered (a target's).
	PathCrossUser = "cross-user-replay"
	// PathRefusedMoved: an intent refused, money then paid to its payer,
	// and the refused request sent again with its key (a target's, with a
	// balance source).
	PathRefusedMoved = "refused-then-moved"
	// PathDBSettled: an intent answered 5xx (a database failure), then
	// settled with its key (a target's, with --db-proxy).
	PathDBSettled = "db-failure-settled"
	// PathAcrossRestart: a key told a transfer before the target restarted
	// was sent after it and answered with that transfer (--restart).
	PathAcrossRestart = "replay-after-restart"
	// PathNoKey: a transfer request sent without its key was refused (a
	// target's).
	PathNoKey = "refused-no-key"
	// PathReordered: a retry with the body's members in another order was
	// answered with the key's first transfer (a target's).
	PathReordered = "replay-reordered"

	// The lock outside the database, in front of server copy 0.
	PathLockTakenAfterExpiry = "lock-taken-after-expiry" // the lock granted over an expired one its holder never released
	PathLockReleaseRefused   = "lock-release-refused"    // a compare-and-delete found the lock no longer its caller's and deleted nothing
)

// pathInfo says what a path is and what reaches it.
type pathInfo struct {
	name, what, reachedBy string
}

var pathList = []pathInfo{
	{PathReplay, "a retry answered with the stored answer", "lose-response, late, duplicate"},
	{PathReplayAfterFinal, "the same intent sent again after its final answer, replayed byte for byte", "the workload's repeats"},
	{PathReplayAfterCleanup, "… after the cleanup job ran, the key younger than the retention", "the repeats after cleanup"},
	{PathConflict, "409 while another request held the key", "duplicate, crash-after-claim"},
	{PathWaited, "the wait policy waited for the holder, then replayed its answer", "duplicate on the waiting copy (--servers 2 or more)"},
	{PathConcurrentCopy, "a copy sent while another request held the key, answered 409 or made to wait for that request's answer", "duplicate"},
	{PathTakeover, "an expired lock taken over", "clock-jump, crash-after-claim, expire-mid-write"},
	{PathExpiredMidWrite, "the lock expired while its holder was still writing", "expire-mid-write"},
	{PathFencing, "a late holder failed the fencing check and rolled back", "expire-mid-write, crash-after-claim"},
	{PathWoken, "a server stopped after its claim was woken", "crash-after-claim"},
	{PathTxRetry, "a transaction run again after a deadlock", "deadlock"},
	{PathDisconnectFinished, "the client went away mid-request; the server finished anyway", "disconnect"},
	{PathFreezeWaited, "a freeze of the sender waited for the transfer's row lock", "freeze"},
	{PathHealed, "an unknown outcome resolved by healing", "any fault that leaves an intent unknown"},
	{PathReuseRecipient, "422 for a key reused with another recipient", "the workload's buggy clients"},
	{PathReuseSender, "422 for a key reused with another sender account", "the workload's buggy clients"},
	{PathReuseAmount, "422 for a key reused with another amount", "the workload's buggy clients"},
	{PathSharedKey, "two users with one key text, each answered for their own request", "the workload"},
	{PathExactBalance, "exactly the balance sent, leaving ₦0", "the edge intents (25 intents or more)"},
	{PathOverBalance, "one kobo more than the balance, refused", "the edge intents (50 intents or more)"},
	{PathInsufficient, "422 insufficient_funds", "the workload"},
	{PathNotOwner, "404 for another user's account", "the workload"},
	{PathFrozenSender, "422 from a frozen account", "the workload"},
	{PathClosedSender, "422 from a closed account", "the workload"},
	{PathFrozenRecipient, "422 to a frozen account", "the workload"},
	{PathClosedRecipient, "422 to a closed account", "the workload"},
	{PathMissingRecipient, "422 to an account that does not exist", "the workload"},
	{PathSameAccount, "422 to the account it comes from", "the workload"},
	{PathCrossing, "opposite transfers between two accounts at the same time", "concurrent clients on few accounts"},
	{PathAcrossRestart, "a key told a transfer before the target restarted, replayed after it", "--restart (once, after the answer of one intent in the middle half of the run)"},
	{PathDBSettled, "an intent answered 5xx during a database failure, then settled with its key", "--db-proxy's faults (one intent in 20 arms one)"},
	{PathRefusedMoved, "a refusal for funds sent again with its key after money arrived", "the workload with a balance source (one turn in five of its followers, 80 intents or more)"},
	{PathCrossUser, "another user sent a key that made a transfer, with its exact body, and was answered", "the workload (one turn in four of its followers, 32 intents or more)"},
	{PathNoKey, "a transfer request sent without its key, refused", "the workload (one intent in 16 is first sent without its key)"},
	{PathReordered, "a retry with the body's members in another order, answered with the key's first transfer", "the workload (one intent in 16 is retried with its members reordered)"},
	{outbox.PathTakeover, "an outbox row claimed again after its dispatcher's lease expired", "dispatcher-crash, dispatcher-pause, clock-jump"},
	{outbox.PathLostClaim, "a dispatcher paused past its lease found its row taken over and sent nothing", "dispatcher-pause with clock-jump"},
	{outbox.PathResendReplayed, "an SMS sent again, recognised by the provider's key: no second message", "dispatcher-crash, provider-timeout"},
	{outbox.PathRetryAfterFailure, "a failed send retried after its backoff, and sent", "provider-timeout"},
	{outbox.PathRedeliverySkipped, "an event redelivered and found processed: no second effect", "consumer-crash"},
	{PathLockTakenAfterExpiry, "the lock outside the database taken over after its holder stalled past the expiry", "crash-after-claim, clock-jump on server copy 0"},
	{PathLockReleaseRefused, "a holder's compare-and-delete found the lock no longer its own (expired or taken over) and deleted nothing", "crash-after-claim, clock-jump on server copy 0"},
}

// Paths lists every defence path, in the order the coverage table prints
// them.
func Paths() []string {
	out := make([]string, len(pathList))
	for i, p := range pathList {
		out[i] = p.name
	}
	return out
}

// PathCount is how often a run took one defence path.
type PathCount struct {
	Path      string `json:"path"`
	What      string `json:"what"`
	ReachedBy string `json:"reachedBy"`
	Count     int    `json:"count"`
}

// FaultCount is how often a fault kind fired, against its configured rate.
type FaultCount struct {
	Kind  string  `json:"kind"`
	Rate  float64 `json:"rate"`
	Fired int     `json:"fired"`
}

// Coverage is what a run exercised: each defence path and each fault kind.
type Coverage struct {
	Paths  []PathCount  `json:"paths"`
	Faults []FaultCount `json:"faults"`
	// Unrecognised, in a target run, names the answers that reached a path
	// in a way the judge cannot name (a reuse refused with a status or code
	// that is not a refusal of the key), with the flag that would name
	// them: the run cannot vouch for that path until they are named.
	Unrecognised []string `json:"unrecognised,omitempty"`
	// Unexplained names the errors of the side effects' workers that no
	// outage of the run explains (History.WorkerErrors): while they
	// failed for a reason of their own, the run cannot vouch for its
	// side effects.
	Unexplained []string `json:"unexplained,omitempty"`
}

// Missing lists what the run should have exercised and did not: every
// defence path never taken, every fault kind with a rate above zero that
// never fired, every answer it could not name (Unrecognised), and every
// error of the side effects' workers its outages do not explain.
func (c Coverage) Missing() []string {
	out := append(append([]string{}, c.Unexplained...), c.Unrecognised...)
	for _, f := range c.Faults {
		if f.Rate > 0 && f.Fired == 0 {
			out = append(out, fmt.Sprintf("fault %s (rate %g) never fired", f.Kind, f.Rate))
		}
	}
	for _, p := range c.Paths {
		if p.Count == 0 {
			out = append(out, fmt.Sprintf("%s never happened (reached by: %s)", p.Path, p.ReachedBy))
		}
	}
	return out
}

// Complete reports whether the run exercised everything.
func (c Coverage) Complete() bool { return len(c.Missing()) == 0 }

// Cover computes the coverage of a history.
func Cover(h *History) Coverage {
	counts := map[string]int{}
	for k, n := range h.Server {
		counts[k] += n
	}
	f := newFacts(h)
	byKey := map[string][]*Intent{}
	for idx := range h.Intents {
		in := &h.Intents[idx]
		byKey[in.Key] = append(byKey[in.Key], in)
		if in.Healed && in.Outcome != SeenUnknown {
			counts[PathHealed]++
		}
		if t := h.Config.Target; t != nil {
			// Only what the answers show: the target's rules are its own.
			// A reuse refused is the reuse path reached; whether the
			// refusal was the key's is Unrecognised's to say.
			replays := t.replays(in)
			countAnswers(counts, in, replays, false)
			if t.keylessRefused(in) {
				counts[PathNoKey]++
			}
			for k, a := range in.Attempts {
				if a.Reordered && replays[k] {
					counts[PathReordered]++
				}
			}
			if in.Outcome != SeenUnknown && slices.ContainsFunc(in.Attempts, func(a Attempt) bool { return a.Status >= 500 }) {
				counts[PathDBSettled]++
			}
			if t.replayedAcrossRestart(h, in) {
				counts[PathAcrossRestart]++
			}
			if in.Overdraw && refusedThenFunded(h, in) {
				counts[PathRefusedMoved]++
			}
			if in.Reuse == ReuseUser {
				// Reached once the key it copies has a transfer to leak.
				if in.ReuseOf >= 0 && in.ReuseOf < len(h.Intents) && len(t.receipts(&h.Intents[in.ReuseOf])) > 0 &&
					slices.ContainsFunc(in.Attempts, func(a Attempt) bool { return a.Seen != SeenUnknown }) {
					counts[PathCrossUser]++
				}
				continue
			}
			if in.Reuse != "" && slices.ContainsFunc(in.Attempts, func(a Attempt) bool { return a.Seen == SeenRejected }) {
				counts["key-reused-"+in.Reuse]++
			}
			continue
		}
		countAnswers(counts, in, nil, h.Cleanup != nil)
		x := f.expect(in)
		reused, exact, over, rule := false, false, false, false
		for _, a := range in.Attempts {
			if a.Seen == SeenUnknown {
				continue
			}
			resp := a.Response()
			code := resp.Code()
			if code == bank.CodeInsufficientFunds && !a.Replayed {
				counts[PathInsufficient]++
			}
			if in.Reuse != "" && a.Status == 422 && code == idem.CodeKeyReused {
				reused = true
			}
			// A rule's answer counts however it reached the client, the
			// original or a replay of it; once per intent.
			if ok, _ := x.allows(in, resp); !ok || x.reuse {
				continue
			}
			rule = rule || x.rule != ""
			exact = exact || x.solo && resp.OK() && in.Request.AmountKobo == x.balance
			over = over || x.solo && !resp.OK() && in.Request.AmountKobo == x.balance+1
		}
		if rule {
			counts[x.rule]++
		}
		if reused {
			counts["key-reused-"+in.Reuse]++
		}
		if exact {
			counts[PathExactBalance]++
		}
		if over {
			counts[PathOverBalance]++
		}
	}
	own := func(in *Intent) bool {
		return slices.ContainsFunc(in.Attempts, func(a Attempt) bool { return a.Seen != SeenUnknown }) &&
			!slices.ContainsFunc(in.Attempts, func(a Attempt) bool { return a.Response().Code() == idem.CodeKeyReused })
	}
	if t := h.Config.Target; t != nil {
		// From outside, only a transfer of its own proves a user was
		// answered for their own request: a refusal may be the key's under
		// a code the judge does not know.
		own = func(in *Intent) bool {
			return len(t.receipts(in)) > 0 && !slices.ContainsFunc(in.Attempts, t.refusedAsReused)
		}
	}
	counts[PathSharedKey] = sharedKeys(byKey, own)
	if h.Config.Target != nil {
		counts[PathConcurrentCopy] = concurrentCopies(counts)
	}
	counts[PathCrossing] = crossings(h)

	var c Coverage
	if t := h.Config.Target; t != nil {
		c.Unrecognised = t.unrecognised(h)
	}
	if h.WorkerErrors.Unexplained() > 0 {
		c.Unexplained = h.WorkerErrors.unexplained()
	}
	for _, p := range pathList {
		if !applies(h, p.name) {
			continue
		}
		c.Paths = append(c.Paths, PathCount{Path: p.name, What: p.what, ReachedBy: p.reachedBy, Count: counts[p.name]})
	}
	kinds := FaultKinds()
	if h.Config.Target != nil {
		kinds = TargetFaultKinds()
	}
	for _, k := range kinds {
		c.Faults = append(c.Faults, FaultCount{Kind: k, Rate: h.Config.Faults[k], Fired: h.Fired[k]})
	}
	if t := h.Config.Target; t != nil && t.DBListen != "" {
		// Armed at one intent in dbEvery, each kind by turns.
		for _, k := range []string{FaultDBCut, FaultDBLostCommit} {
			c.Faults = append(c.Faults, FaultCount{Kind: k, Rate: 1.0 / (2 * dbEvery), Fired: h.Fired[k]})
		}
	}
	return c
}

// refusedThenFunded reports whether in, an Overdraw intent, was refused, its
// payer then paid by its follower (a transfer acknowledged), and the
// refused request sent again with its key after that, and answered.
func refusedThenFunded(h *History, in *Intent) bool {
	first := slices.IndexFunc(in.Attempts, func(a Attempt) bool { return a.Seen != SeenUnknown })
	if first < 0 || in.Attempts[first].Seen != SeenRejected || in.Index+1 >= len(h.Intents) {
		return false
	}
	fund := &h.Intents[in.Index+1]
	paid := int64(-1)
	for _, a := range fund.Attempts {
		if a.Seen == SeenOK {
			paid = a.EndNs
			break
		}
	}
	return fund.Funds && paid >= 0 && slices.ContainsFunc(in.Attempts, func(a Attempt) bool {
		return a.Phase == PhaseAfterFunds && a.Seen != SeenUnknown && a.StartNs >= paid
	})
}

// countAnswers counts the paths any client sees in in's answers: a 409, a
// replay (of a retry, of a repeat after the final answer, of a repeat after
// the cleanup job ran). replays, when given, says which attempts were
// replays by the evidence of their transfer ids (a target's); otherwise
// the replay mark says.
func countAnswers(counts map[string]int, in *Intent, replays []bool, cleaned bool) {
	for k, a := range in.Attempts {
		replayed := a.Replayed && a.Seen != SeenUnknown
		if replays != nil {
			replayed = replays[k]
		}
		switch {
		case a.Status == 409:
			counts[PathConflict]++
		case replayed && !a.Lookup:
			switch a.Phase {
			case PhaseRepeat:
				counts[PathReplayAfterFinal]++
			case PhaseAfterCleanup:
				if cleaned {
					counts[PathReplayAfterCleanup]++
				}
			default:
				counts[PathReplay]++
			}
		}
	}
}

// applies reports whether a history can take path p: the side effects'
// paths need a history that recorded its side effects, and the lock's a run
// with the lock in front of a server (in process).
func applies(h *History, p string) bool {
	if t := h.Config.Target; t != nil {
		return t.applies(p)
	}
	switch {
	case p == PathConcurrentCopy:
		return false // bank-sim's own servers count conflict-409 and wait-then-replay apart
	case p == PathCrossUser || p == PathRefusedMoved || p == PathDBSettled || p == PathAcrossRestart || p == PathNoKey || p == PathReordered:
		return false // a target's workload only
	case p == PathLockTakenAfterExpiry || p == PathLockReleaseRefused:
		return h.SideEffects != nil && h.SideEffects.LockChecked
	case slices.Contains(outbox.PipelinePaths(), p):
		return h.SideEffects != nil
	}
	return true
}

// sharedKeys counts the key texts that two or more users sent, where every
// one of those users' own intents (not a reuse) was answered for its own
// request (own).
func sharedKeys(byKey map[string][]*Intent, own func(*Intent) bool) int {
	n := 0
	for _, ins := range byKey {
		users := map[int64]bool{}
		ok := true
		for _, in := range ins {
			if in.Reuse != "" {
				continue
			}
			users[in.UserID] = true
			ok = ok && own(in)
		}
		if ok && len(users) > 1 {
			n++
		}
	}
	return n
}

// crossings counts the transfers that ran while a transfer between the
// same two accounts, the other way round, was running too: both were
// answered 201 by the attempt that did the work, and those attempts
// overlapped in time.
func crossings(h *History) int {
	type span struct{ start, end int64 }
	type pair struct{ a, b int64 }
	ways := map[pair][]span{}
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			if a.Seen == SeenOK && !a.Replayed && !a.Lookup {
				ways[pair{in.Request.From, in.Request.To}] = append(ways[pair{in.Request.From, in.Request.To}], span{a.StartNs, a.EndNs})
				break
			}
		}
	}
	n := 0
	for p, these := range ways {
		other := ways[pair{p.b, p.a}]
		if len(other) == 0 {
			continue
		}
		// Sorted by start, with the latest end so far: a span [s, e] meets
		// the other way iff some span starting by e ends at s or later.
		sort.Slice(other, func(i, j int) bool { return other[i].start < other[j].start })
		maxEnd := make([]int64, len(other))
		for i, o := range other {
			maxEnd[i] = o.end
			if i > 0 {
				maxEnd[i] = max(maxEnd[i], maxEnd[i-1])
			}
		}
		for _, s := range these {
			k := sort.Search(len(other), func(i int) bool { return other[i].start > s.end })
			if k > 0 && maxEnd[k-1] >= s.start {
				n++
			}
		}
	}
	return n / 2
}

// Union is the coverage of several runs taken together: a defence path
// counts as taken when any run took it (its counts add up), a fault as fired
// when it fired in any run. A campaign judges its seeds this way: one seed
// that never reached a rare path proves nothing about it, but another seed
// that did has; only a path no seed reached is missing. Paths and faults
// keep the coverage table's order; a fault's rate is the highest any run
// gave it.
func Union(cs ...Coverage) Coverage {
	var u Coverage
	path := map[string]int{}
	fault := map[string]int{}
	for _, c := range cs {
		// One run's errors are the union's: another run reaching a path
		// does not explain them.
		u.Unexplained = append(u.Unexplained, c.Unexplained...)
		for _, p := range c.Paths {
			i, ok := path[p.Path]
			if !ok {
				path[p.Path] = len(u.Paths)
				u.Paths = append(u.Paths, p)
				continue
			}
			u.Paths[i].Count += p.Count
		}
		for _, f := range c.Faults {
			i, ok := fault[f.Kind]
			if !ok {
				fault[f.Kind] = len(u.Faults)
				u.Faults = append(u.Faults, f)
				continue
			}
			u.Faults[i].Fired += f.Fired
			u.Faults[i].Rate = max(u.Faults[i].Rate, f.Rate)
		}
	}
	// Runs that list different paths (one recorded its side effects, one
	// did not) each keep the table's order; together too.
	rank := func(name string, order []string) int {
		if i := slices.Index(order, name); i >= 0 {
			return i
		}
		return len(order)
	}
	paths, kinds := Paths(), FaultKinds()
	slices.SortStableFunc(u.Paths, func(a, b PathCount) int { return rank(a.Path, paths) - rank(b.Path, paths) })
	slices.SortStableFunc(u.Faults, func(a, b FaultCount) int { return rank(a.Kind, kinds) - rank(b.Kind, kinds) })
	return u
}

// Unreached names, in short, what Missing explains: each defence path never
// taken (the defences first: what a reader looks for), then "fault KIND"
// for each fault with a rate that never fired. A campaign's table prints it
// for each seed.
func (c Coverage) Unreached() []string {
	var out []string
	for _, p := range c.Paths {
		if p.Count == 0 {
			out = append(out, p.Path)
		}
	}
	for _, f := range c.Faults {
		if f.Rate > 0 && f.Fired == 0 {
			out = append(out, "fault "+f.Kind)
		}
	}
	return out
}

// CoverageCounts is a coverage in short, as a campaign keeps it for each
// seed: how often each defence path that applied to the run was taken (the
// paths never taken too, at zero), and how often each fault fired. With the
// run's rates, Coverage gives the whole back; a campaign of 10,000 seeds
// keeps a tenth of what the whole would take.
type CoverageCounts struct {
	Paths  map[string]int `json:"paths"`
	Faults map[string]int `json:"faults,omitempty"`
	// Unexplained is Coverage's, whole: no rate gives it back.
	Unexplained []string `json:"unexplained,omitempty"`
}

// Counts is c in short.
func (c Coverage) Counts() CoverageCounts {
	n := CoverageCounts{Paths: make(map[string]int, len(c.Paths)), Unexplained: c.Unexplained}
	for _, p := range c.Paths {
		n.Paths[p.Path] = p.Count
	}
	for _, f := range c.Faults {
		if f.Fired > 0 {
			if n.Faults == nil {
				n.Faults = map[string]int{}
			}
			n.Faults[f.Kind] = f.Fired
		}
	}
	return n
}

// Coverage is the whole coverage again, for a run with these rates: each
// path with what it is and what reaches it, in the table's order, and each
// fault kind with its rate. A path this version of bank-sim does not know
// comes last, unexplained.
func (n CoverageCounts) Coverage(rates Rates) Coverage {
	c := Coverage{Unexplained: n.Unexplained}
	for _, p := range pathList {
		if count, ok := n.Paths[p.name]; ok {
			c.Paths = append(c.Paths, PathCount{Path: p.name, What: p.what, ReachedBy: p.reachedBy, Count: count})
		}
	}
	var unknown []string
	for name := range n.Paths {
		if !slices.ContainsFunc(pathList, func(p pathInfo) bool { return p.name == name }) {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		c.Paths = append(c.Paths, PathCount{Path: name, Count: n.Paths[name]})
	}
	kinds := FaultKinds()
	var extra []string
	for k := range rates {
		if !slices.Contains(kinds, k) {
			extra = append(extra, k)
		}
	}
	for k := range n.Faults {
		if !slices.Contains(kinds, k) && !slices.Contains(extra, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range append(kinds, extra...) {
		c.Faults = append(c.Faults, FaultCount{Kind: k, Rate: rates[k], Fired: n.Faults[k]})
	}
	return c
}
