package chaos

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// saltEnsure keeps the draws of the guaranteed faults apart from the run's
// others.
const saltEnsure = 0x656e73757265

// A short run's seeded schedule may leave a rare fault with no attempt at
// all, or only with attempts that cannot take the defence it is there for
// (a deadlock staged on a transfer its rules refuse never reaches its
// writes). The schedule of an own run of Intents is therefore completed:
// for each fault kind with a rate above zero, if no intent meets it on its
// first attempt (the one every intent makes) while being a transfer the
// rules allow, inside the stretch of the run no cut or kill of PostgreSQL
// can reach, one such intent is drawn from the seed and given it there.
// A schedule that already had them all is left as it was, byte for byte.

// calm reports, for each intent of the run, whether its first attempt
// runs away from every partition cut and kill of PostgreSQL: it begins at
// least one client's worth of intents before the cut's intent, or well
// after it (never after a kill). During a cut every client sits on an attempt that cannot end
// until the link heals or the attempt times out, so the intents begun
// meanwhile are a few per client for each ten seconds of cut; three
// clients' worth (more for long cuts) is taken as its reach.
func (c Config) calm() []bool {
	ok := make([]bool, c.Intents)
	for i := range ok {
		ok[i] = true
	}
	strike := func(at int, lasts time.Duration) {
		reach := c.Clients * (3 + int(lasts/(10*time.Second)))
		for i := max(at-c.Clients, 0); i < min(at+reach, c.Intents); i++ {
			ok[i] = false
		}
	}
	if pl := c.Partition; pl != nil {
		for _, at := range pl.At(c) {
			strike(at, pl.For)
		}
	}
	if c.KillPostgres || c.Failover != "" {
		// While PostgreSQL is down every attempt fails at once, so the
		// clients run through intents as fast as they can: nothing after
		// the kill is sure to meet a live database.
		strike(c.CrashIntent(), 0)
		for i := c.CrashIntent(); i < c.Intents; i++ {
			ok[i] = false
		}
	}
	return ok
}

// sure reports whether intent i is a transfer the rules allow that nothing
// else in the workload leans on: its own user's hot account to another hot
// account, neither an edge intent nor a follower, and an amount at most
// half its sender's opening balance, so that the transfers around it
// cannot leave it short (when small). A fault on its first attempt reaches
// the transfer's checks and its writes.
func (l *layout) sure(p Planned, small bool) bool {
	if p.Follower || p.Reuse != "" {
		return false
	}
	from, ok := l.byID[p.Request.From]
	if !ok || from.OwnerID != p.UserID || !slices.Contains(l.hot, from.ID) {
		return false
	}
	if p.Request.To == from.ID || !slices.Contains(l.hot, p.Request.To) {
		return false
	}
	return !small || p.Request.AmountKobo <= from.BalanceKobo/2
}

// needsWrites reports whether fault kind takes its defence only on a
// transfer that passes its checks: the ones staged between the checks and
// the writes. A crash after the claim needs a key of its own to claim;
// the others fire, and take theirs, on any request.
func needsWrites(kind string) bool {
	return kind == FaultDeadlock || kind == FaultExpireMidWrite || kind == FaultFreeze
}

// ensured is the first-attempt faults the guarantee adds to a schedule:
// intent → fault. ok is false when the sure stretch holds too few
// intents to give every enabled fault its chance.
type ensured struct {
	at map[int]string
	// lost, when lostKind is set, is an intent each of whose fault-phase
	// attempts meets lostKind, a fault that leaves it unknown: healing
	// then has an outcome to resolve.
	lost     int
	lostKind string
	ok       bool
}

// lostFaults never let an answer reach the client, whatever the server
// does: an intent whose every attempt meets one is left for healing. The
// guarantee places the first with a rate; a 500 before the commit counts
// too when the seed drew it.
var lostFaults = []string{FaultLoseResponse, FaultDropRequest, FaultLate, FaultFailBeforeCommit}

// fault is the fault e gives attempt of intent i, if any.
func (e ensured) fault(i, attempt int) (string, bool) {
	if e.lostKind != "" && i == e.lost {
		return e.lostKind, true
	}
	if attempt != 1 {
		return "", false
	}
	f, ok := e.at[i]
	return f, ok
}

var ensuredCache sync.Map // ensureKey → ensured

type ensureKey struct {
	seed                                   uint64
	intents, clients, accounts, insts, max int
	faults, partition                      string
	kill                                   bool
	failover                               string
}

// ensure computes (once per config) the guaranteed faults of c, which
// must have its defaults.
func (c Config) ensure() ensured {
	if c.Script != nil || c.Target != nil || c.Intents <= 0 || len(c.Faults) == 0 {
		return ensured{ok: true}
	}
	k := ensureKey{seed: c.Seed, intents: c.Intents, clients: c.Clients, accounts: c.Accounts, insts: c.Instances, max: c.MaxAttempts,
		faults: c.Faults.String(), kill: c.KillPostgres, failover: c.Failover}
	if c.Partition != nil {
		k.partition = fmt.Sprintf("%+v", *c.Partition)
	}
	if v, ok := ensuredCache.Load(k); ok {
		return v.(ensured)
	}
	v := c.placeMissing()
	if !v.ok {
		// Too short to give them all their chance: the seed's draw
		// stands, and the run's header says how many intents can
		// (CoverageFloor).
		v.at, v.lostKind = nil, ""
	}
	ensuredCache.Store(k, v)
	return v
}

// placeMissing is ensure, uncached.
func (c Config) placeMissing() ensured {
	l := c.layout()
	calm := c.calm()
	have := map[string]bool{}
	lost, heldDrawn := false, false
	var free []int // sure intents of the window with no fault of their own
	for i := range c.Intents {
		if !calm[i] {
			continue
		}
		p := c.intentIn(l, i)
		lost = lost || c.allLost(i)
		heldDrawn = heldDrawn || !p.Follower && c.locked(i) && c.drawnFault(i, 1) == FaultCrashAfterClaim && c.allLost(i, FaultCrashAfterClaim)
		switch f := c.drawnFault(i, 1); {
		case f == "":
			if l.sure(p, true) && !c.head(l, i) {
				free = append(free, i)
			}
		case l.sure(p, false) || !needsWrites(f) && (f != FaultCrashAfterClaim || !p.Follower):
			have[f] = true
		}
	}
	e := ensured{at: map[int]string{}, ok: true}
	// One intent is left unknown for healing: each of its attempts meets
	// a crash after the claim when that fault is on (the key stays held by
	// a stopped server, so every retry is told 409), on an intent whose
	// first attempt and healing's first land on copy 0, behind the lock
	// outside the database: healing finds that lock expired and takes it
	// over, and the stopped holder, woken, has its release refused. Else,
	// unless the seed drew one, every attempt loses its answer.
	held := c.Faults[FaultCrashAfterClaim] > 0
	kind := FaultCrashAfterClaim
	if !held {
		kind = ""
		for _, k := range lostFaults {
			if c.Faults[k] > 0 {
				kind = k
				break
			}
		}
	}
	var fit []int
	for _, i := range free {
		if !held || c.locked(i) {
			fit = append(fit, i)
		}
	}
	if len(fit) == 0 {
		// No room on copy 0: healing and the woken server still get
		// theirs; the lock's paths are left to the draw.
		fit = free
	}
	switch {
	case kind == "" || held && heldDrawn || !held && lost:
	case len(fit) == 0:
		e.ok = false
	default:
		e.lost, e.lostKind = fit[rng(c.Seed, saltEnsure, uint64(len(attemptFaultKinds())), 0).IntN(len(fit))], kind
		free = slices.DeleteFunc(free, func(i int) bool { return i == e.lost })
		have[kind] = true
	}
	for n, kind := range attemptFaultKinds() {
		if c.Faults[kind] <= 0 || have[kind] {
			continue
		}
		if len(free) == 0 {
			e.ok = false
			continue
		}
		j := rng(c.Seed, saltEnsure, uint64(n), 0).IntN(len(free))
		e.at[free[j]] = kind
		free = slices.Delete(free, j, j+1)
	}
	return e
}

// locked reports whether intent i's first attempt and healing's first
// land on server copy 0, behind the lock outside the database.
func (c Config) locked(i int) bool {
	return c.Instance(i, 1) == 0 && c.Instance(i, c.MaxAttempts+1) == 0
}

// allLost reports whether the seed's draw gives every fault-phase attempt
// of intent i a fault of lostFaults (or one of also).
func (c Config) allLost(i int, also ...string) bool {
	for a := 1; a <= c.MaxAttempts; a++ {
		if f := c.drawnFault(i, a); !slices.Contains(lostFaults, f) && !slices.Contains(also, f) {
			return false
		}
	}
	return true
}

// CoverageFloor is the fewest intents with which a run like c gives every
// enabled fault its chance on a transfer that can take its defence, and
// meets each of the workload's key reuses and edge intents: 0 when c
// already does (or is not a run of a number of intents bank-sim draws).
// Below it the run may well end INCONCLUSIVE; bank-sim says so before the
// run, not after.
func (c Config) CoverageFloor() int {
	c = c.WithDefaults()
	if c.Script != nil || c.Target != nil || c.Intents <= 0 {
		return 0
	}
	// Every key reuse kind and the shared key text take a block each
	// (head); the edge intents need 25 intents a solo account.
	workload := len(followerKinds) * headBlock
	if c.Intents >= workload && c.ensure().ok {
		return 0
	}
	for n := max(c.Intents, workload); n < 1_000_000; n = n + max(n/16, 1) {
		d := c
		d.Intents = n
		if d.placeMissing().ok {
			// The smallest of the last stretch that does.
			lo := max(n-max(n/16, 1)+1, workload)
			for m := lo; m < n; m++ {
				d.Intents = m
				if d.placeMissing().ok {
					return m
				}
			}
			return n
		}
	}
	return 0
}
