package probe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/postgres/pgtest"
	"github.com/banksim/bank-sim/probe"
)

// mistake is how the probe meets one of the lesson's server-side mistakes.
type mistake struct {
	// check is the probe's check that explains the mistake: it must fail,
	// and its reason must say explains.
	check, explains string
	// copies of the server the mistake needs in order to show.
	copies int
	// lockTTL of the server's key store, when the mistake needs another
	// than the tests' short one. A mistake that abandons keys (the claim on
	// the request's context, issue 7) shows as a failure only when the lock
	// outlives the probe's settle time: give it idem.DefaultLockTTL; with a
	// short lock the key is taken over in time and only warned about.
	lockTTL time.Duration
	// skew sets the copies' clocks apart (see simOptions.skew).
	skew time.Duration
	// blind, instead of check, says why no black-box client can see the
	// mistake against a healthy server.
	blind string
	// tries, for a mistake that shows only when a race goes its way: the
	// probe runs again, each time with the next seed, up to this many
	// times, until the check fails. One run is not enough: a drain of 8
	// through a read-compare-write transfer, at load 8, once lost no debit.
	tries int
}

// probeTable maps every server-side mistake of mistakes.All() to what the probe
// does with it, as measured. Each caught mistake is seen through what a
// client can do from outside: a retry on another copy, a reused key, another
// user's key, a client that hangs up mid-request, a concurrent drain, a
// replay compared with the first answer byte for byte.
//
// Since issue 7 bank-sim's server finishes a request's work on a context of
// its own, whatever the client does: a client can no longer make it fail or
// stall mid-work. The mistakes that cost money only when the server fails or
// stalls (no-expiry, second-transaction, stored-5xx, no-fencing) are
// therefore blind to a black-box client, and pinned as such: if the probe
// ever fails against one of them, this test asks for the check to be named.
// (With --db-proxy the probe fails the target's database at its commits:
// db-faults then catches stored-5xx and second-transaction; TestDBFaults.
// This table is the probe without it.)
var probeTable = map[string]mistake{
	"memory-keys":        {check: "other-copy", explains: "made another transfer", copies: 2},
	"no-fingerprint":     {check: "key-reused-amount", explains: "the request fingerprint is ignored"},
	"unscoped-keys":      {check: "other-user-same-key", explains: "keys are shared by all users instead of scoped to each"},
	"read-compare-write": {check: "drain", explains: "debit(s) of this amount were lost, money created from nothing", tries: 5},
	// The old server of issue 7, defect 1: a hang-up while the key's claim
	// is being written cancels the request's context after PostgreSQL has
	// committed the claim, and the key stays in progress with nobody
	// working on it. With serve's 30 s lock the retries give up after the
	// probe's settle time; with the tests' short lock a retry would take
	// the key over in time and the probe would only warn.
	"claim-on-request-context": {check: "hang-up", explains: "every retry with the same key is still told 409 (in progress)", lockTTL: idem.DefaultLockTTL},
	// The lesson's table: jsonb writes the members in its own order.
	// bank-sim promises byte-for-byte replays (lesson() says so), so the
	// difference fails; for a target without that promise it is a warning.
	"jsonb-replay": {check: "replay", explains: "is not the first answer byte for byte"},
	"no-expiry": {blind: "a lock without expiry matters only for a key left in progress with nobody working on it, " +
		"after a server crashed or stalled past its claim; the server finishes or releases every request's work whatever the client does, " +
		"so no client can make it abandon a key"},
	"second-transaction": {blind: "the transfer's commit and the response's are microseconds apart inside one request, " +
		"and the mistake costs money only when the server fails between them; nothing a client does makes it fail there " +
		"(a hang-up no longer cuts the work short)"},
	"stored-5xx": {blind: "a 500 is stored only after an unexpected failure of the server's own (its database, its work timeout, its stop); " +
		"a hang-up no longer cuts the work short, and every bad input is answered 4xx, so no client can cause the 500 that would be stored"},
	"no-fencing": {blind: "a fencing token matters only when a holder's lock expires while it is still working, " +
		"which takes a server stalled past its lock; a client cannot stall a healthy server"},
	"refusal-in-second-transaction": {blind: "the refusal's own transaction fails only when the server or its database fails between the two commits; " +
		"nothing a client does makes it fail there, so every refusal is stored"},
	"refusal-failure-as-500-response": {blind: "a refused request's transaction fails only when the server or its database fails before its COMMIT; " +
		"nothing a client does makes it fail there, so every refusal is stored and its key completed"},
	"rebuilt-refusal-replay": {blind: "measured: no check resends a request the bank refused and compares the replay byte for byte " +
		"(the replay checks resend a transfer's 201)"},
	"closed-checked-last":              {blind: "the mistake moves the money of a closed account's refused transfer; the contract gives a client no way to close an account or to find a closed one"},
	"frozen-only-inactive":             {blind: "the mistake lets a closed account send and receive; the contract gives a client no way to close an account or to find a closed one"},
	"one-lock-per-customer":            {blind: "the mistake leaves a customer's other account unlocked, which only a freeze mid-transfer shows, and the contract gives a client no way to freeze an account; the probe's users each pay from one account"},
	"receipt-last-value":               {blind: "the mistake names another request's transfer only when that request takes an id between the transfer's INSERT and the read of its answer's id; the probe's checks run one after the other, and the transfers it sends at once pay from one account, whose row lock makes them take their ids one after the other"},
	"own-accounts-unchecked":           {blind: "the mistake needs a transfer between two accounts of one user, and the probe's users each pay from or into one account"},
	"credit-by-customer":               {blind: "the mistake credits the payee's first account instead of the one named, and the probe's users each own one account, so it is the one named"},
	"own-credit-in-second-transaction": {blind: "the mistake needs a transfer between two accounts of one user, and the probe's users each pay from or into one account"},
	"no-balance-floor":                 {blind: "the mistake needs a transfer between two accounts of one user, and the probe's users each pay from or into one account"},
	// The probe's transfers go from account 1 to account 2 and back: those
	// back to 1 credit their own sender.
	"credit-second-row": {check: "drain", explains: "more left the account than the answers account for"},
	"no-row-lock": {blind: "the account must change status (be frozen) between the transfer's checks and its debit; " +
		"the contract gives a client no way to freeze an account"},
	// The side effects' mistakes (the outbox package) live beyond the
	// transfer's answer: an SMS, an event, a dispatcher, a consumer, a lock
	// in front of the keys, orders. The contract shows none of them.
	"sms-in-transaction":             {blind: sideEffect},
	"sms-after-commit":               {blind: sideEffect},
	"sms-before-checks":              {blind: sideEffect},
	"sms-per-owned-account":          {blind: sideEffect},
	"publish-in-transaction":         {blind: sideEffect},
	"publish-after-commit":           {blind: sideEffect},
	"no-provider-key":                {blind: sideEffect},
	"dispatcher-without-skip-locked": {blind: sideEffect},
	"mark-done-without-claim-token":  {blind: sideEffect},
	"claim-without-lease-check":      {blind: sideEffect},
	"give-up-on-same-error":          {blind: sideEffect},
	"consumer-without-dedup":         {blind: sideEffect},
	"offset-before-effect":           {blind: sideEffect},
	"marker-after-effect":            {blind: sideEffect},
	"no-event-for-own-accounts":      {blind: sideEffect},
	"lock-release-without-token":     {blind: sideEffect},
	"lock-get-then-set":              {blind: sideEffect},
	"ship-read-then-write":           {blind: "mark-shipped is an orders operation, not part of the transfer contract"},
	"async-replication": {blind: "the mistake is the database's replication to its standby, not the handler's: " +
		"it costs only when the primary dies and the standby is promoted, which no client can cause"},
	// Run on two copies whose clocks are 31 s apart, the most a black-box
	// client could be given.
	"app-clock": {copies: 2, skew: 31 * time.Second, blind: "a server whose clock runs ahead takes over a live claim, " +
		"but the fencing check rolls the late holder back: the client sees at most a 5xx it retries, and one transfer; " +
		"the money is lost only when the cleanup job, run by a server whose clock runs behind, deletes a fresh key, and a client cannot run the cleanup"},
}

// sideEffect is why the probe cannot see the side effects' mistakes.
const sideEffect = "a side effect beyond the database (an SMS, an event, its dispatcher or consumer, the lock in front of the keys): " +
	"the transfer contract answers the same, and a client sees no SMS or event; bank-sim scenario and chaos check them"

// untouchedTransfers are the blind mistakes that leave the transfer's own
// handling as the correct server's (a side effect beyond the database, an
// orders operation, the database's replication): against them the probe
// meets the correct server, as TestEveryCheckPassesAgainstBankSim does, so
// by default one of them (sms-in-transaction) stands for the rest, and the
// exhaustive run pins each in the table.
var untouchedTransfers = map[string]bool{
	"sms-after-commit": true, "sms-before-checks": true, "sms-per-owned-account": true, "publish-in-transaction": true, "publish-after-commit": true,
	"no-provider-key": true, "dispatcher-without-skip-locked": true, "mark-done-without-claim-token": true,
	"claim-without-lease-check": true, "consumer-without-dedup": true, "offset-before-effect": true, "lock-release-without-token": true,
	"marker-after-effect": true, "no-event-for-own-accounts": true, "lock-get-then-set": true,
	"give-up-on-same-error": true, "ship-read-then-write": true, "async-replication": true,
}

// Against each of the lesson's server-side mistakes, the probe fails on the
// check that explains it.
func TestEachServerSideMistakeFailsTheCheckThatExplainsIt(t *testing.T) {
	for _, b := range mistakes.All() {
		if b.NewKeyPerAttempt || b.NewKeyAfterServerError {
			continue // the client's mistake: the probe is the client
		}
		m, ok := probeTable[b.Name]
		if !ok {
			t.Errorf("mistakes.All() has a server-side mistake the probe's table does not map: %q (%s).\n"+
				"Add it to probeTable in probe/mistakes_test.go: run the probe against bank-sim with it "+
				"(startBankSim with simOptions{bug: &bug}) and name the check that fails and explains it, "+
				"or, if none can, say why a black-box client cannot see it (blind) — and update the table in docs/probe.md", b.Name, b.Mistake)
			continue
		}
		t.Run(b.Name, func(t *testing.T) {
			if untouchedTransfers[b.Name] {
				pgtest.Exhaustive(t)
			}
			t.Parallel()
			sim := startBankSim(t, simOptions{copies: max(m.copies, 1), bug: &b, lockTTL: m.lockTTL, skew: m.skew})
			cfg := lesson(sim.urls...)
			if m.lockTTL > 0 {
				// A key abandoned under a 30 s lock is told 409 for the whole
				// settle time: 1.5 s of it proves the abandonment as well as
				// 4 s does, and the run waits it out.
				cfg.Settle = 1500 * time.Millisecond
			}
			rep := runProbe(t, cfg)
			for try := 2; try <= m.tries; try++ {
				if c, _ := rep.Check(m.check); c.Status == probe.Fail {
					break
				}
				cfg.Seed++
				rep = runProbe(t, cfg)
			}
			var failed []string
			for _, c := range rep.Checks {
				if c.Status == probe.Fail {
					failed = append(failed, c.Name)
				}
			}
			if m.blind != "" {
				if len(failed) > 0 {
					t.Errorf("the probe now fails %v against %s, which the table calls blind (%s): map it to the check that explains it, here and in docs/probe.md\n%s", failed, b.Name, m.blind, dump(rep))
				}
				// What it may still have noticed, for the table in docs/probe.md.
				for _, c := range rep.Checks {
					for _, e := range c.Evidence {
						if strings.HasPrefix(e, "⚠") {
							t.Logf("%s, blind: %s warned: %s", b.Name, c.Name, e)
						}
					}
				}
				return
			}
			c, _ := rep.Check(m.check)
			if c.Status != probe.Fail {
				t.Fatalf("%s: check %s is %s, want FAIL (in %d run(s)); failed: %v\n%s", b.Name, m.check, c.Status, max(m.tries, 1), failed, dump(rep))
			}
			if !strings.Contains(c.Reason, m.explains) {
				t.Fatalf("%s: check %s failed for another reason than the mistake (want %q): %s\n%s", b.Name, m.check, m.explains, c.Reason, dump(rep))
			}
			t.Logf("%s → %s: %s (all failed: %s)", b.Name, m.check, c.Reason, strings.Join(failed, ", "))
		})
	}
}
