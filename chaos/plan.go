package chaos

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
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
)

// FaultKinds lists every fault kind, sorted.
func FaultKinds() []string {
	k := []string{FaultLoseResponse, FaultDropRequest, FaultDuplicate, FaultCrashAfterClaim,
		FaultFailBeforeCommit, FaultLate, FaultSlow, FaultClockJump}
	sort.Strings(k)
	return k
}

// Rates is the probability of each fault kind on each attempt of the fault
// phase. Their sum must not exceed 1.
type Rates map[string]float64

// DefaultRates fire on about a quarter of the attempts, every kind included,
// so that one short run meets every failure the lesson describes.
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
		sum += p
	}
	if sum > 1 {
		return nil, fmt.Errorf("the fault rates add up to %.2f, more than 1", sum)
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
	Bug        *idem.Bug     `json:"bug,omitempty"`
	// HTTP carries every attempt over real sockets: the api server on
	// 127.0.0.1 for each instance, a fault proxy in front of each, and the
	// retrying client (api/client). Otherwise attempts call the handler in
	// process.
	HTTP bool `json:"http,omitempty"`
	// KillPostgres kills the PostgreSQL server with SIGKILL once, at a
	// moment the seed picks, and restarts it on the same data while the
	// clients run.
	KillPostgres bool `json:"killPostgres,omitempty"`
}

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	if c.Clients <= 0 {
		c.Clients = 8
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

// Salts keep the streams of one seed apart.
const (
	saltIntent   = 0x696e74656e74
	saltFault    = 0x6661756c74
	saltInstance = 0x696e7374
	saltOpening  = 0x6f70656e
	saltCrash    = 0x6372617368
)

func rng(seed uint64, salt, a, b uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^salt, a<<20|b))
}

// Opening is the bank the run starts with: Accounts accounts, each owned by
// the user with its id, balances from ₦500 to ₦2,500, drawn from the seed.
func (c Config) Opening() []bank.Account {
	c = c.WithDefaults()
	r := rng(c.Seed, saltOpening, 0, 0)
	out := make([]bank.Account, c.Accounts)
	for i := range out {
		id := int64(i + 1)
		out[i] = bank.Account{ID: id, OwnerID: id, Holder: fmt.Sprintf("Acct%d Chaos", id), Status: "active",
			BalanceKobo: 50_000 + r.Int64N(200_000)}
	}
	return out
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

// Planned is an intent as the seed decides it, before anything runs.
type Planned struct {
	Label   string
	UserID  int64
	Key     string
	Request bank.TransferRequest
}

// Intent returns intent i: who pays whom how much, and its key. Amounts run
// from ₦10 to ₦1,000, so against balances of a few thousand naira both
// transfers and insufficient-funds refusals happen.
func (c Config) Intent(i int) Planned {
	c = c.WithDefaults()
	r := rng(c.Seed, saltIntent, uint64(i), 0)
	from := 1 + r.Int64N(int64(c.Accounts))
	to := 1 + r.Int64N(int64(c.Accounts-1))
	if to >= from {
		to++
	}
	return Planned{
		Label:   fmt.Sprintf("intent-%d", i),
		UserID:  from,
		Key:     fmt.Sprintf("chaos-%016x-%08x", r.Uint64(), i),
		Request: bank.TransferRequest{From: from, To: to, AmountKobo: 1_000 + r.Int64N(99_000)},
	}
}

// Fault returns the fault that attempt (from 1) of intent i meets in the
// fault phase, or "" for none.
func (c Config) Fault(i, attempt int) string {
	if len(c.Faults) == 0 {
		return ""
	}
	u := rng(c.Seed, saltFault, uint64(i), uint64(attempt)).Float64()
	for _, k := range FaultKinds() {
		if u < c.Faults[k] {
			return k
		}
		u -= c.Faults[k]
	}
	return ""
}

// Instance returns the server copy that attempt of intent i lands on.
func (c Config) Instance(i, attempt int) int {
	c = c.WithDefaults()
	return rng(c.Seed, saltInstance, uint64(i), uint64(attempt)).IntN(c.Instances)
}

// AttemptKey is the key the client sends on attempt: the intent's own key,
// or a new one per attempt when the client has that bug.
func (c Config) AttemptKey(p Planned, attempt int) string {
	if c.Bug != nil && c.Bug.NewKeyPerAttempt && attempt > 1 {
		return fmt.Sprintf("%s-a%d", p.Key, attempt)
	}
	return p.Key
}

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
	s := Schedule{Intents: make([]Planned, n), Faults: make([][]string, n)}
	for i := range n {
		s.Intents[i] = c.Intent(i)
		s.Faults[i] = make([]string, c.MaxAttempts)
		for a := range c.MaxAttempts {
			s.Faults[i][a] = c.Fault(i, a+1)
		}
	}
	return s
}
