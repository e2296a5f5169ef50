package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/banksim/bank-sim/outbox"
	"github.com/banksim/bank-sim/probe"
)

// Fault kinds a chaos run can inject, each at its own rate per attempt.
const (
	FaultLoseResponse     = "lose-response"      // the server answers; the answer is lost
	FaultDropRequest      = "drop-request"       // the request never reaches the server
	FaultDuplicate        = "duplicate"          // two copies arrive at the same moment
	FaultCrashAfterClaim  = "crash-after-claim"  // the server claims the key and goes silent
	FaultFailBeforeCommit = "fail-before-commit" // the transaction breaks just before COMMIT; 500
	FaultLate             = "late"               // the request is delayed past the client's timeout, then runs
	FaultSlow             = "slow"               // the server is slow, but answers in time
	FaultClockJump        = "clock-jump"         // the clock jumps past the lock TTL, then the request runs
	// FaultDeadlock: another transaction locks the request's key row and
	// then waits for the sender's row, which the transfer holds; the
	// transfer, completing its key, waits for it in turn, and PostgreSQL
	// aborts the transfer (40P01), which InTx runs again.
	FaultDeadlock = "deadlock"
	// FaultExpireMidWrite: the key's lock expires while its holder is
	// between its checks and its writes, and a retry on another server takes
	// the key over at that moment; the holder's completion must fail the
	// fencing check, and its release must not undo the takeover.
	FaultExpireMidWrite = "expire-mid-write"
	// FaultDisconnect: the client goes away mid-request, at a point the
	// seed picks: before the claim, while the claim's answer is on its way,
	// just after the claim, or inside the transaction (over HTTP: the
	// connection is reset just after the request, or half-closed). The
	// server must finish its work or release the key, never leave it in
	// progress with nobody working on it.
	FaultDisconnect = "disconnect"
	// FaultFreeze: an administrator freezes the sender's account while the
	// transfer stands between its checks and its debit. Holding the row
	// lock, the transfer makes the freeze wait (it gives up after 50 ms);
	// without it, the freeze commits and a frozen account is debited. The
	// account is made active again once the attempt is over.
	FaultFreeze = "freeze"
)

// FaultKinds lists every fault kind, sorted: the clients' attempts' and
// the side effects'.
func FaultKinds() []string {
	k := append(attemptFaultKinds(), outbox.PipelineFaults()...)
	sort.Strings(k)
	return k
}

// attemptFaultKinds are the faults an attempt can meet, sorted; at most one
// per attempt.
func attemptFaultKinds() []string {
	k := []string{FaultLoseResponse, FaultDropRequest, FaultDuplicate, FaultCrashAfterClaim,
		FaultFailBeforeCommit, FaultLate, FaultSlow, FaultClockJump, FaultDeadlock, FaultExpireMidWrite, FaultDisconnect, FaultFreeze}
	sort.Strings(k)
	return k
}

// sideEffectFault reports whether kind is one of the side effects' faults
// (outbox.PipelineFaults), which fire per outbox row or per event rather
// than per attempt.
func sideEffectFault(kind string) bool { return slices.Contains(outbox.PipelineFaults(), kind) }

// Rates is the probability of each fault kind at each of its chances: an
// attempt of the fault phase for the clients' faults, whose sum must not
// exceed 1; an outbox row's delivery, a batch's claim, an SMS or an event's
// delivery for the side effects' (see outbox.PipelineConfig).
type Rates map[string]float64

// DefaultRates fire on about a quarter of the attempts, every kind included,
// so that one run of the default 1,000 intents meets every failure the
// lesson describes, each many times over.
func DefaultRates() Rates {
	return Rates{
		FaultLoseResponse:     0.05,
		FaultDropRequest:      0.03,
		FaultDuplicate:        0.05,
		FaultCrashAfterClaim:  0.02,
		FaultFailBeforeCommit: 0.04,
		FaultLate:             0.03,
		FaultSlow:             0.03,
		FaultClockJump:        0.01,
		FaultDeadlock:         0.01,
		FaultExpireMidWrite:   0.01,
		FaultDisconnect:       0.03,
		FaultFreeze:           0.01,
		// The side effects': per row sent, per claim, per SMS, per event
		// delivered.
		outbox.FaultDispatcherCrash: 0.05,
		outbox.FaultDispatcherPause: 0.05,
		outbox.FaultProviderTimeout: 0.05,
		outbox.FaultConsumerCrash:   0.05,
	}
}

// AuditRates are the rates of the audit's short chaos runs: every fault
// kind at 3% or more, so that a few hundred intents meet each one often and
// take every defence path (at the default rates, 300 intents miss one now
// and then, and a column that missed a defence proves nothing about it).
func AuditRates() Rates {
	return Rates{
		FaultLoseResponse:           0.05,
		FaultDropRequest:            0.03,
		FaultDuplicate:              0.05,
		FaultCrashAfterClaim:        0.03,
		FaultFailBeforeCommit:       0.04,
		FaultLate:                   0.03,
		FaultSlow:                   0.03,
		FaultClockJump:              0.03,
		FaultDeadlock:               0.03,
		FaultExpireMidWrite:         0.03,
		FaultDisconnect:             0.04,
		FaultFreeze:                 0.03,
		outbox.FaultDispatcherCrash: 0.08,
		outbox.FaultDispatcherPause: 0.08,
		outbox.FaultProviderTimeout: 0.08,
		outbox.FaultConsumerCrash:   0.08,
	}
}

// ParseRates reads "default", "none", or "kind=rate,kind=rate" (a kind
// without a rate gets 0.05).
func ParseRates(s string) (Rates, error) {
	switch strings.TrimSpace(s) {
	case "", "default":
		return DefaultRates(), nil
	case "none":
		return Rates{}, nil
	}
	known := map[string]bool{}
	for _, k := range FaultKinds() {
		known[k] = true
	}
	r := Rates{}
	sum := 0.0
	for _, part := range strings.Split(s, ",") {
		name, val, hasVal := strings.Cut(strings.TrimSpace(part), "=")
		if !known[name] {
			return nil, fmt.Errorf("unknown fault %q; known: %s", name, strings.Join(FaultKinds(), ", "))
		}
		p := 0.05
		if hasVal {
			var err error
			if p, err = strconv.ParseFloat(val, 64); err != nil || p < 0 || p > 1 {
				return nil, fmt.Errorf("fault %s: rate %q is not a probability from 0 to 1", name, val)
			}
		}
		r[name] = p
		if !sideEffectFault(name) {
			sum += p
		}
	}
	if sum > 1 {
		return nil, fmt.Errorf("the attempts' fault rates add up to %.2f, more than 1", sum)
	}
	return r, nil
}

// String is the form ParseRates reads.
func (r Rates) String() string {
	if len(r) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range FaultKinds() {
		if p, ok := r[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%g", k, p))
		}
	}
	return strings.Join(parts, ",")
}

// Config is one chaos run.
type Config struct {
	Seed    uint64 `json:"seed"`
	Clients int    `json:"clients"`
	// Intents is how many intents to run; when zero, clients start new
	// intents until Duration has passed.
	Intents  int           `json:"intents"`
	Duration time.Duration `json:"durationNs,omitempty"`
	// Accounts is how many accounts the bank opens: a few make them hot.
	Accounts int   `json:"accounts"`
	Faults   Rates `json:"faults"`
	// Instances is how many copies of the server sit behind the load
	// balancer; each attempt lands on one picked from the seed.
	Instances int `json:"instances"`
	// MaxAttempts bounds each intent's attempts in the fault phase.
	MaxAttempts int `json:"maxAttempts"`
	// AuditEvery is how often the auditor reads every balance.
	AuditEvery time.Duration `json:"auditEveryNs"`
	Bug        *mistakes.Bug `json:"bug,omitempty"`
	// HTTP carries every attempt over real sockets: the api server on
	// 127.0.0.1 for each instance, a fault proxy in front of each, and the
	// retrying client (api/client). Otherwise attempts call the handler in
	// process.
	HTTP bool `json:"http,omitempty"`
	// KillPostgres kills the PostgreSQL server with SIGKILL once, at a
	// moment the seed picks, and restarts it on the same data while the
	// clients run.
	KillPostgres bool `json:"killPostgres,omitempty"`
	// Failover, when set, is the replication of a run on a primary and a
	// streaming standby (ReplicationAsync or ReplicationSync): the crash
	// that KillPostgres brings is then the primary's death and the
	// standby's promotion, not a restart in place. chaos/ha.RunPair runs
	// it, and supplies the crash.
	Failover string `json:"failover,omitempty"`
	// Partition, when set, is the run's network partition (chaos
	// --partition): the server copies in network namespaces cut off from
	// PostgreSQL (PartitionApp, an HTTP run), or with Failover the primary
	// cut off from its standby (PartitionStandby). Recorded so that a
	// saved history says how to repeat it.
	Partition *PartitionPlan `json:"partition,omitempty"`
	// Target, when set, runs the intents against someone else's transfer
	// API from outside (chaos --target): through the fault proxy, with the
	// network's faults only, and checked by the rules a black box allows.
	// The bank is then the target's, and the run needs no database.
	Target *Target `json:"target,omitempty"`
	// Deterministic runs every client, and every goroutine a fault starts,
	// as a task of the deterministic scheduler (see sched.go): the same
	// seed and config give the same history, byte for byte. It needs
	// Intents; it cannot be combined with HTTP or KillPostgres.
	Deterministic bool `json:"deterministic,omitempty"`
	// Interleaving is how a deterministic run picks its next task; nil is
	// PolicyRandom, drawn from the seed.
	Interleaving *Interleaving `json:"interleaving,omitempty"`
	// AuditSteps is how many scheduler steps a deterministic run lets pass
	// between two audits: DefaultAuditSteps when zero, none when negative.
	AuditSteps int `json:"auditSteps,omitempty"`
	// Script, when set, is the run's whole workload, given instead of
	// drawn from the seed: a shrunk run's, or a recipe's.
	Script *Script `json:"script,omitempty"`
	// Dispatchers is how many outbox dispatchers run beside the clients;
	// 3 when zero.
	Dispatchers int `json:"dispatchers,omitempty"`
	// PipelineFaults are side-effect fault decisions that fire whatever the
	// rates (outbox.PipelineConfig.Fire): a recipe's, as its run made them.
	PipelineFaults []outbox.Firing `json:"pipelineFaults,omitempty"`
}

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	if c.Target != nil {
		t := *c.Target
		if t.Amount <= 0 {
			t.Amount = DefaultTargetAmount
		}
		if t.Timeout <= 0 {
			t.Timeout = probe.DefaultTimeout
		}
		if t.Settle <= 0 {
			t.Settle = DefaultTargetSettle
		}
		c.Target = &t
		if c.Faults == nil {
			c.Faults = TargetRates()
		}
		c.Instances = max(len(t.URLs), 1)
	}
	if c.Clients <= 0 {
		c.Clients = 8
	}
	if c.Script != nil {
		c.Intents, c.Duration = len(c.Script.Intents), 0
	}
	if c.Intents <= 0 && c.Duration <= 0 {
		c.Intents = 1000
	}
	if c.Accounts < 2 {
		c.Accounts = 5
	}
	if c.Faults == nil {
		c.Faults = DefaultRates()
	}
	if c.Instances <= 0 {
		c.Instances = 3
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 4
	}
	if c.AuditEvery <= 0 {
		c.AuditEvery = 25 * time.Millisecond
	}
	return c
}

// The replications of a run through a failover (Config.Failover).
const (
	// ReplicationAsync: the primary acknowledges a commit once its own WAL
	// has it (PostgreSQL's default).
	ReplicationAsync = "async"
	// ReplicationSync: the primary acknowledges a commit once the standby
	// has applied it.
	ReplicationSync = "sync"
)

// Salts keep the streams of one seed apart.
const (
	saltIntent   = 0x696e74656e74
	saltFault    = 0x6661756c74
	saltInstance = 0x696e7374
	saltOpening  = 0x6f70656e
	saltCrash    = 0x6372617368
	saltEdge     = 0x65646765
	saltFollow   = 0x666f6c6c6f77
	saltRepeat   = 0x726570656174
	saltPoint    = 0x706f696e74
	saltSchedule = 0x7363686564
	saltDB       = 0x6462
	saltShape    = 0x7368617065
)

func rng(seed uint64, salt, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^salt, a<<20|b))
}

// Account ids of the run's bank. None equals its owner's user id, and
// account 2 belongs to user 1, so that a client of user 2 sending from
// account 2 must be told 404: an ownership check that compares the account
// id with the user id lets it through.
const (
	frozenID  = 2       // user 1's frozen account
	closedID  = 17      // the last user's closed account, with money in it
	MissingID = 999_999 // an account that does not exist
)

func hotID(k int) int64  { return 103 + 10*int64(k) }
func soloID(e int) int64 { return 907 + 10*int64(e) }

// layout is the run's bank: who owns which account, and which accounts the
// workload uses how.
type layout struct {
	accounts []bank.Account // sorted by id
	byID     map[int64]bank.Account
	hot      []int64           // the active accounts every ordinary intent draws from
	owned    map[int64][]int64 // user → every account they own
	users    []int64
	solo     []int64 // one account per edge intent, touched by nothing else
	edges    map[int]int
	// spare is the other recipient a key reused for another recipient
	// names when the hot accounts give none: the closed account.
	spare int64
	span  int // how many slots the edges and followers are spread over
}

// layout builds the bank: Accounts hot accounts, two to each user (user 1
// also owns the frozen one, the last user the closed one, so that with an
// odd number of hot accounts that user too has two), and one solo account
// per edge intent. Balances come from the seed.
func (c Config) layout() *layout {
	c = c.WithDefaults()
	if c.Target != nil {
		return c.Target.layout(c)
	}
	if c.Script != nil {
		return c.Script.layout()
	}
	r := rng(c.Seed, saltOpening, 0, 0)
	users := max(2, (c.Accounts+1)/2)
	l := &layout{byID: map[int64]bank.Account{}, owned: map[int64][]int64{}, edges: map[int]int{}}
	for u := 1; u <= users; u++ {
		l.users = append(l.users, int64(u))
	}
	open := func(id, owner int64, holder, status string, balance int64) {
		a := bank.Account{ID: id, OwnerID: owner, Holder: holder, Status: status, BalanceKobo: balance}
		l.accounts = append(l.accounts, a)
		l.byID[id] = a
		l.owned[owner] = append(l.owned[owner], id)
	}
	for k := range c.Accounts {
		id := hotID(k)
		open(id, int64(1+k/2), fmt.Sprintf("Acct%d Chaos", id), "active", 50_000+r.Int64N(200_000))
		l.hot = append(l.hot, id)
	}
	open(frozenID, 1, "Frozen Chaos", "frozen", 100_000+r.Int64N(100_000))
	open(closedID, l.users[len(l.users)-1], "Closed Chaos", "closed", 100_000+r.Int64N(100_000))
	l.spare = closedID

	// Edge intents: a transfer of exactly an account's balance, and one of
	// a kobo more, each from an account no other intent touches, so that the
	// right answer (201 leaving ₦0, or 422 insufficient_funds) is known.
	l.span = c.Intents
	if l.span <= 0 {
		l.span = 200
	}
	n := min(4, l.span/25)
	for e := range n {
		id := soloID(e)
		open(id, l.users[e%len(l.users)], fmt.Sprintf("Solo%d Chaos", id), "active", 20_000+r.Int64N(100_000))
		l.solo = append(l.solo, id)
		// An even slot in the e-th of n equal stretches of the run.
		lo, width := e*l.span/n, l.span/n
		slot := lo + r.IntN(max(width-1, 1))
		l.edges[slot&^1] = e
	}
	sort.Slice(l.accounts, func(a, b int) bool { return l.accounts[a].ID < l.accounts[b].ID })
	return l
}

// Opening is the bank the run starts with (sorted by id): Accounts active
// accounts that ordinary intents move money between, two per user, balances
// from ₦500 to ₦2,500; user 1's frozen account 2 and the last user's closed
// account 17, both with money in them; and, for runs of 25 intents or more,
// up to four solo accounts for the edge intents. Account ids never equal
// their owners' user ids.
func (c Config) Opening() []bank.Account {
	return c.layout().accounts
}

// CrashIntent is the intent whose start kills PostgreSQL (KillPostgres,
// with Intents): one in the middle half of the run, drawn from the seed.
func (c Config) CrashIntent() int {
	c = c.WithDefaults()
	n := max(c.Intents, 1)
	return n/4 + rng(c.Seed, saltCrash, 0, 0).IntN(max(n/2, 1))
}

// CrashAfter is when PostgreSQL is killed in a run of Duration: in the
// middle half of it, drawn from the seed.
func (c Config) CrashAfter() time.Duration {
	c = c.WithDefaults()
	return c.Duration/4 + time.Duration(rng(c.Seed, saltCrash, 1, 0).Int64N(max(int64(c.Duration/2), 1)))
}

// Ways a buggy client reuses the key of its previous intent.
const (
	ReuseRecipient = "recipient" // the same key, another recipient
	ReuseSender    = "sender"    // the same key, another of the user's accounts as sender
	ReuseAmount    = "amount"    // the same key, another amount
	// ReuseUser: the same key and the exact same body, sent by another
	// user (chaos --target only): a server that finds stored answers by the
	// key text alone replays the first user's transfer to them.
	ReuseUser = "user"
)

// Planned is an intent as the seed decides it, before anything runs.
type Planned struct {
	Label   string
	UserID  int64
	Key     string
	Request bank.TransferRequest
	// Follower marks an intent that the client of the intent before it
	// (Index-1) sends once that one has its final answer: a key reuse, or
	// another user with the same key text.
	Follower bool
	// Reuse, when set, makes this a buggy client's intent: it sends the key
	// of intent ReuseOf, its own previous one, with a request that differs
	// in Reuse. The only right answer is 422 idempotency_key_reused.
	Reuse   string
	ReuseOf int
	// Overdraw (a target run's): the amount is decided when the intent is
	// sent, just more than its payer then holds, so that it is refused for
	// funds; its follower (Funds) then pays the payer, and the refused
	// request is sent again with its key (PhaseAfterFunds): it must be
	// refused again. Without a balance source the planned amount is sent.
	Overdraw bool
	Funds    bool
	// Repeat: once the intent has its final answer, the client sends it once
	// more with the same key (a user tapping again, an app that missed the
	// answer): it must be replayed, byte for byte. A key reuse always
	// repeats, and must be refused again.
	Repeat bool
	// Keyless (a target run's): before its first attempt, the client sends
	// the request once without its key (a client that forgot the header):
	// it must be refused (the lesson: 400), and nothing moves. That
	// request is not the key's: no rule but no-key judges it.
	Keyless bool
	// Reorder (a target run's): every attempt after the first, the repeat
	// too, writes the body's members in another order (the same request in
	// other bytes): it must be answered as the first was. It always
	// repeats, so that one such retry comes after the key's answer.
	Reorder bool
}

// Rates of the workload's shapes, per intent.
const (
	rateStranger     = 0.04 // from another user's account: 404
	rateNoSender     = 0.01 // from an account that does not exist: 404
	rateInactive     = 0.03 // from the user's own frozen or closed account: 422
	rateSameAccount  = 0.01 // to the account it comes from: 422
	rateToFrozen     = 0.03 // to a frozen account: 422
	rateToClosed     = 0.03 // to a closed account: 422
	rateToMissing    = 0.02 // to an account that does not exist: 422
	rateRepeat       = 0.05 // sent once more after its final answer
	rateAfterCleanup = 0.05 // sent once more after the cleanup job ran
)

// Intent returns intent i: who pays whom how much, with which key, and what
// the client does around it.
func (c Config) Intent(i int) Planned {
	c = c.WithDefaults()
	return c.intentIn(c.layout(), i)
}

func (c Config) intentIn(l *layout, i int) Planned {
	if c.Script != nil {
		return c.Script.planned(i)
	}
	var p Planned
	if i%2 == 1 && c.head(l, i-1) {
		p = c.follower(l, i)
	} else if c.Target != nil {
		p = c.Target.ordinary(c, l, i)
		p.Overdraw = c.head(l, i) && c.followerKind(i+1) == followFunds
		keyless, reorder := c.shapeSlots(l, i/headBlock)
		p.Keyless, p.Reorder = i == keyless, i == reorder
	} else if e, ok := l.edges[i]; ok {
		p = c.edge(l, i, e)
	} else {
		p = c.ordinary(l, i)
	}
	// A buggy client that reused a key retries too: its retry must be
	// refused again.
	p.Repeat = p.Reuse != "" || p.Reorder || rng(c.Seed, saltRepeat, uint64(i), 0).Float64() < rateRepeat
	return p
}

// headBlock is the stretch of intents that holds one head: an intent whose
// client then sends a follower (a key reuse, or another user with the same
// key text). The followers' kinds take turns block by block, so every
// 4·headBlock intents meet each of them once, whatever the seed.
const headBlock = 16

// followerKinds, in turn: a reuse with another recipient, another sender
// account, another amount, and another user's own intent with the same key
// text ("").
var followerKinds = []string{ReuseRecipient, ReuseSender, ReuseAmount, ""}

// targetFollowerKinds are a target run's: its users own one account each,
// so no reuse can name another sender account of the user's; in that turn
// another user sends the first user's key and exact body instead.
// A fifth turn funds a refusal: the head asks for just more than its payer
// holds (refused for funds), the other user sends the payer the difference
// and more, and the head's client sends the refused request again with its
// key (the refused-then-moved rule).
var targetFollowerKinds = []string{ReuseRecipient, ReuseUser, ReuseAmount, "", followFunds}

// followFunds is the follower that pays its head's payer (Planned.Funds).
const followFunds = "funds"

// fundsTimes is the funding follower's amount in units of the target's
// Amount; its head asks for overdrawBy of them more than its payer holds,
// so that it is refused before the funds arrive and payable after them,
// whatever the other clients move meanwhile (at most twice Amount each).
const (
	fundsTimes = 20
	overdrawBy = 10
)

// dbEvery: with a database fault proxy in front of a target's PostgreSQL
// (Target.DBListen), one intent in dbEvery, drawn from the seed in each
// block, arms a fault for the next COMMIT through the proxy: cut before
// it, and its answer lost after it, by turns.
const dbEvery = 20

// DBFault is the database fault intent i's start arms in a target run
// with --db-proxy (0 for none). Whichever request commits next meets it:
// the clients run concurrently, and the rules judge every intent by its
// answers, not by which one met the fault.
func (c Config) DBFault(i int) faults.DBFault {
	if c.Target == nil || c.Target.DBListen == "" {
		return 0
	}
	b := i / dbEvery
	if i != b*dbEvery+rng(c.Seed, saltDB, uint64(b), 0).IntN(dbEvery) {
		return 0
	}
	return faults.DBFault(1 + b%2)
}

// FundsAmount is what the follower that pays a refused payer sends: the
// plan states it with the money a target run may move.
func FundsAmount(t *Target) int64 {
	if t.Amount <= 0 {
		return fundsTimes * DefaultTargetAmount
	}
	return fundsTimes * t.Amount
}

// followerKind is the kind of follower i, in the run's turn.
func (c Config) followerKind(i int) string {
	kinds := followerKinds
	if c.Target != nil {
		kinds = targetFollowerKinds
	}
	return kinds[((i-1)/headBlock)%len(kinds)]
}

// head reports whether intent i is followed by a follower.
func (c Config) head(l *layout, i int) bool {
	if c.Script != nil {
		return i+1 < len(c.Script.Intents) && c.Script.Intents[i+1].Follower
	}
	if i%2 == 1 || c.Intents > 0 && i+1 >= c.Intents {
		return false
	}
	return i == c.headSlot(l, i/headBlock)
}

// headSlot is the head of block b: an even intent of the block, drawn from
// the seed, that is not an edge intent.
func (c Config) headSlot(l *layout, b int) int {
	k := rng(c.Seed, saltFollow, uint64(b), 0).IntN(headBlock / 2)
	for try := range headBlock / 2 {
		slot := b*headBlock + 2*((k+try)%(headBlock/2))
		if _, edge := l.edges[slot]; !edge {
			return slot
		}
	}
	return -1
}

// shapeSlots are block b's intents (of headBlock) that a target run sends
// in another shape, drawn from the seed among those that are neither the
// block's head nor its follower (whose keys are shared): keyless sends a
// request without its key first (Planned.Keyless), reorder retries with
// the body's members in another order (Planned.Reorder).
func (c Config) shapeSlots(l *layout, b int) (keyless, reorder int) {
	free := make([]int, 0, headBlock)
	for i := b * headBlock; i < (b+1)*headBlock; i++ {
		if !c.head(l, i) && !(i%2 == 1 && c.head(l, i-1)) {
			free = append(free, i)
		}
	}
	r := rng(c.Seed, saltShape, uint64(b), 0)
	k := r.IntN(len(free))
	keyless = free[k]
	free = slices.Delete(free, k, k+1)
	return keyless, free[r.IntN(len(free))]
}

// ordinary draws intent i: mostly a transfer between hot accounts, amounts
// from ₦10 to ₦1,000, so that against balances of a few thousand naira both
// transfers and insufficient-funds refusals happen; sometimes one the rules
// refuse (another user's account, an inactive one, the same account).
func (c Config) ordinary(l *layout, i int) Planned {
	r := rng(c.Seed, saltIntent, uint64(i), 0)
	p := Planned{Label: fmt.Sprintf("intent-%d", i), Key: fmt.Sprintf("chaos-%016x-%08x", r.Uint64(), i)}
	amount := 1_000 + r.Int64N(99_000)
	from := l.hot[r.IntN(len(l.hot))]
	user := l.byID[from].OwnerID
	to := l.otherHot(r, from)
	switch u := r.Float64(); {
	case u < rateStranger:
		user = l.users[r.IntN(len(l.users))]
		if user == 2 && r.IntN(2) == 0 {
			from = frozenID // account 2, user 1's: the id equals the caller's user id
		} else if !l.hasOtherOwner(from, user) {
			from = l.strangerAccount(r, user)
		}
	case u < rateStranger+rateNoSender:
		from = MissingID
	case u < rateStranger+rateNoSender+rateInactive:
		from = frozenID
		if r.IntN(2) == 0 {
			from = closedID
		}
		user = l.byID[from].OwnerID
	case u < rateStranger+rateNoSender+rateInactive+rateSameAccount:
		to = from
	default:
		switch v := r.Float64(); {
		case v < rateToFrozen:
			to = frozenID
		case v < rateToFrozen+rateToClosed:
			to = closedID
		case v < rateToFrozen+rateToClosed+rateToMissing:
			to = MissingID
		}
	}
	p.UserID, p.Request = user, bank.TransferRequest{From: from, To: to, AmountKobo: amount}
	return p
}

// edge is edge intent e: from its solo account, exactly its balance (e
// even) or one kobo more (e odd).
func (c Config) edge(l *layout, i, e int) Planned {
	r := rng(c.Seed, saltEdge, uint64(i), 0)
	a := l.byID[l.solo[e]]
	amount := a.BalanceKobo
	if e%2 == 1 {
		amount++
	}
	return Planned{Label: fmt.Sprintf("intent-%d", i), UserID: a.OwnerID,
		Key:     fmt.Sprintf("chaos-%016x-%08x", r.Uint64(), i),
		Request: bank.TransferRequest{From: a.ID, To: l.hot[r.IntN(len(l.hot))], AmountKobo: amount}}
}

// follower is intent i, sent by the client of intent i-1 right after it: a
// buggy client that reuses i-1's key for another request, or another user
// whose own intent happens to carry the same key text.
func (c Config) follower(l *layout, i int) Planned {
	own := c.ordinary
	if c.Target != nil {
		own = func(l *layout, i int) Planned { return c.Target.ordinary(c, l, i) }
	}
	h := own(l, i-1)
	r := rng(c.Seed, saltFollow, uint64(i), 1)
	p := Planned{Label: fmt.Sprintf("intent-%d", i), UserID: h.UserID, Key: h.Key, Request: h.Request, Follower: true, ReuseOf: i - 1}
	switch c.followerKind(i) {
	case ReuseRecipient:
		p.Reuse = ReuseRecipient
		p.Request.To = l.otherHot(r, h.Request.From)
		if p.Request.To == h.Request.To {
			p.Request.To = l.spare
		}
	case ReuseSender:
		p.Reuse = ReuseSender
		for _, id := range l.owned[h.UserID] {
			if id != h.Request.From && !slices.Contains(l.solo, id) {
				p.Request.From = id
				break
			}
		}
		if p.Request.From == h.Request.From {
			p.Reuse = ReuseAmount
			p.Request.AmountKobo++
		}
	case ReuseAmount:
		p.Reuse = ReuseAmount
		p.Request.AmountKobo += 1 + r.Int64N(1_000)
	case ReuseUser:
		p.Reuse = ReuseUser
		p.UserID = l.otherUser(h.UserID)
	case followFunds:
		// A key of its own: the other user pays the head's payer.
		p.Key, p.ReuseOf, p.Funds = own(l, i).Key, 0, true
		p.UserID = l.otherUser(h.UserID)
		p.Request = bank.TransferRequest{From: l.owned[p.UserID][0], To: h.Request.From, AmountKobo: FundsAmount(c.Target)}
	default:
		// Another user, their own transfer, the same key text.
		o := own(l, i)
		p.UserID, p.Request = o.UserID, o.Request
		if p.UserID == h.UserID {
			p.UserID, p.Request = l.otherUsersTransfer(r, h.UserID)
		}
		p.ReuseOf = 0
	}
	return p
}

// otherUser is a paying user other than not (not itself when it is the
// only one).
func (l *layout) otherUser(not int64) int64 {
	for _, u := range l.users {
		if u != not {
			return u
		}
	}
	return not
}

// otherHot is a hot account other than from (from itself when it is the
// only one).
func (l *layout) otherHot(r *rand.Rand, from int64) int64 {
	if len(l.hot) < 2 {
		return l.hot[0]
	}
	for {
		if to := l.hot[r.IntN(len(l.hot))]; to != from {
			return to
		}
	}
}

func (l *layout) hasOtherOwner(id, user int64) bool {
	a, ok := l.byID[id]
	return ok && a.OwnerID != user
}

// strangerAccount is a hot account that user does not own.
func (l *layout) strangerAccount(r *rand.Rand, user int64) int64 {
	var others []int64
	for _, id := range l.hot {
		if l.byID[id].OwnerID != user {
			others = append(others, id)
		}
	}
	if len(others) == 0 {
		return closedID // the last user's; only user 1 owns every hot account
	}
	return others[r.IntN(len(others))]
}

// otherUsersTransfer is an ordinary transfer by a user other than not.
func (l *layout) otherUsersTransfer(r *rand.Rand, not int64) (int64, bank.TransferRequest) {
	for _, id := range l.hot {
		if owner := l.byID[id].OwnerID; owner != not {
			return owner, bank.TransferRequest{From: id, To: l.otherHot(r, id), AmountKobo: 1_000 + r.Int64N(99_000)}
		}
	}
	// Every hot account is not's: the closed account's owner pays from it.
	owner := l.byID[closedID].OwnerID
	return owner, bank.TransferRequest{From: closedID, To: l.hot[0], AmountKobo: 1_000}
}

// RepeatsAfterCleanup reports whether intent i is sent once more after the
// key cleanup job has run (its key is younger than the retention, so it must
// still be replayed).
func (c Config) RepeatsAfterCleanup(i int) bool {
	if c.Script != nil {
		return i < len(c.Script.Intents) && c.Script.Intents[i].AfterCleanup
	}
	return rng(c.Seed, saltRepeat, uint64(i), 1).Float64() < rateAfterCleanup
}

// exhaustEvery: in a run against a target, one intent in exhaustEvery (the
// middle one of each block) loses the answer of every attempt. Nothing
// inside someone else's server can be made to leave an intent unknown, and
// four faulted attempts in a row by chance are rare (a run of 400 intents
// on a quiet machine had none): this way every run of more than
// exhaustEvery/2 intents has an unknown outcome for healing to resolve.
const exhaustEvery = 100

// Fault returns the fault that attempt (from 1) of intent i meets in the
// fault phase, or "" for none: the seed's draw at the rates, completed so
// that every enabled fault gets its chance (ensure).
func (c Config) Fault(i, attempt int) string {
	if c.Script != nil {
		a, ok := c.Script.attempt(i, attempt)
		if !ok {
			return ""
		}
		return a.Fault
	}
	if len(c.Faults) == 0 {
		return ""
	}
	if c.Target != nil && c.Faults[FaultLoseResponse] > 0 && i%exhaustEvery == exhaustEvery/2 {
		return FaultLoseResponse
	}
	if f, ok := c.WithDefaults().ensure().fault(i, attempt); ok {
		return f
	}
	return c.drawnFault(i, attempt)
}

// drawnFault is the fault the seed draws for attempt of intent i, at the
// rates, before the guarantee completes the schedule (ensure).
func (c Config) drawnFault(i, attempt int) string {
	u := rng(c.Seed, saltFault, uint64(i), uint64(attempt)).Float64()
	for _, k := range attemptFaultKinds() {
		if u < c.Faults[k] {
			return k
		}
		u -= c.Faults[k]
	}
	return ""
}

// DisconnectPoint is where in the server's work the client of attempt n of
// intent i goes away, when that attempt meets FaultDisconnect: one of the
// four points of faults.Disconnect, from the seed (in process); over HTTP,
// an even point resets the connection after the request and an odd one
// half-closes it.
func (c Config) DisconnectPoint(i, attempt int) faults.DisconnectPoint {
	if c.Script != nil {
		if a, _ := c.Script.attempt(i, attempt); a.Disconnect != faults.Anywhere {
			return a.Disconnect
		}
		return faults.BeforeClaim
	}
	return faults.DisconnectPoint(1 + rng(c.Seed, saltPoint, uint64(i), uint64(attempt)).IntN(4))
}

// Instance returns the server copy that attempt of intent i lands on.
func (c Config) Instance(i, attempt int) int {
	c = c.WithDefaults()
	if c.Script != nil {
		a, _ := c.Script.attempt(i, attempt)
		return a.Server
	}
	return rng(c.Seed, saltInstance, uint64(i), uint64(attempt)).IntN(c.Instances)
}

// AttemptKey is the key the client sends on attempt: the intent's own key,
// or a new one per attempt when the client has that bug.
func (c Config) AttemptKey(p Planned, attempt int) string {
	if c.Bug != nil && c.Bug.NewKeyPerAttempt && attempt > 1 {
		return NewKey(p, attempt)
	}
	return p.Key
}

// NewKey is the n-th key a buggy client makes for p (n > 1): a new key per
// attempt, or after each 5xx.
func NewKey(p Planned, n int) string { return fmt.Sprintf("%s-a%d", p.Key, n) }

// Schedule is the seed's whole plan for the first n intents: each intent
// and the fault of each of its fault-phase attempts. Two runs with the same
// seed follow the same schedule.
type Schedule struct {
	Intents []Planned
	Faults  [][]string // [intent][attempt-1]
}

// Plan returns the schedule of the first n intents.
func (c Config) Plan(n int) Schedule {
	c = c.WithDefaults()
	l := c.layout()
	s := Schedule{Intents: make([]Planned, n), Faults: make([][]string, n)}
	for i := range n {
		s.Intents[i] = c.intentIn(l, i)
		s.Faults[i] = make([]string, c.MaxAttempts)
		for a := range c.MaxAttempts {
			s.Faults[i][a] = c.Fault(i, a+1)
		}
	}
	return s
}
