// Package probe runs the lesson's failure stories against someone else's
// transfer API, from outside, and says with evidence where it loses or
// doubles money: a black-box harness. It knows the target only through the
// contract (Contract), the users it was given (tokens and accounts) and,
// optionally, a way to read balances (Balances). It never imports bank-sim's
// own server: the lesson's server.js, a team's staging service and
// bank-sim serve are probed the same way.
//
// Each check tells one story (a lost response, a double tap, a key reused for
// another amount, a client that hangs up mid-request, …) with real requests
// on real sockets, through the fault proxy of package faults where the story
// needs the network to fail, and ends PASS, FAIL, UNKNOWN (it ran but what
// the target exposes cannot decide it) or SKIPPED (it could not run).
package probe

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/faults"
)

// Defaults of a Config's zero fields.
const (
	DefaultAmount  = 10_000 // ₦100 per transfer: small, and far from any balance
	DefaultTimeout = 5 * time.Second
	DefaultSettle  = 5 * time.Second
	DefaultCopies  = 8
	DefaultHangUps = 40
	DefaultDrain   = 8
	DefaultWaitFor = 30 * time.Second
)

// Config is one probe run.
type Config struct {
	// URLs are the target's base URLs: one server, or several copies of one
	// service that share its database (then a retry is also sent to another
	// copy, as a load balancer would).
	URLs     []string
	Contract Contract
	// Payer (the lesson's Ada) sends most transfers; Payee (Bola) receives
	// them, and is the second user for the checks of key scope.
	Payer, Payee User
	// Third is another account, used as the other recipient of a reused
	// key; Third.Token may be empty (then its balance is not read).
	Third User
	// Amount is the base amount of one transfer, in kobo; each check adds a
	// few kobo of its own so that its transfers can be told apart.
	Amount int64
	// Seed makes the keys, the jitter and the hang-up moments.
	Seed uint64
	// Timeout bounds every request; Settle bounds how long an intent may
	// stay unsettled (in progress, failing, unanswered) after it was sent.
	Timeout, Settle time.Duration
	// Copies is the size of the duplicate storm, HangUps the rounds of the
	// hang-up check, Drain the concurrent transfers of the drain.
	Copies, HangUps, Drain int
	// Balances, when set, reads balances exactly; otherwise the probe uses
	// what the answers reveal.
	Balances Balances
	// Only and Skip select checks by name.
	Only, Skip []string
	// AllowRemote lets the target be another machine.
	AllowRemote bool
	// Given names the flags given that make a class of defect checkable
	// (FlagRestart, FlagDBProxy): the report lists the others as unchecked.
	Given []string
	// NoRestore leaves the money where the checks moved it; by default the
	// probe sends the net amount back at the end.
	NoRestore bool
	// Restart, when set, restarts the target for the restart check, and
	// RestartCommand says what it runs; WaitFor bounds how long the target
	// may take to answer again after it (DefaultWaitFor when zero).
	Restart        Restarter
	RestartCommand string
	WaitFor        time.Duration
	// ClosedAccount, when set, is an account the team has closed, and
	// Reopen reopens it (ReopenCommand says what it runs): refused-then-moved
	// then also sends a transfer to it, reopens it, and retries with the
	// refusal's key. The contract has no way to close or reopen an account.
	ClosedAccount ID
	Reopen        Restarter
	ReopenCommand string
	// DBListen and DBUpstream, when set, put bank-sim's database fault proxy
	// (faults.DBProxy) in front of the target's PostgreSQL for the
	// db-faults check: it listens on DBListen, where the target's database
	// URL points, and forwards to DBUpstream. LockTTL is how long the
	// target holds a key's lock: a retry may be told 409 that long after a
	// failure, and no longer.
	DBListen, DBUpstream string
	LockTTL              time.Duration
	// OnCheck, when set, hears each check as it ends (for live output).
	OnCheck func(Result)
	// Now is the clock of the report; time.Now when nil.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Amount <= 0 {
		c.Amount = DefaultAmount
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Settle <= 0 {
		c.Settle = DefaultSettle
	}
	if c.Copies <= 0 {
		c.Copies = DefaultCopies
	}
	if c.HangUps <= 0 {
		c.HangUps = DefaultHangUps
	}
	if c.Drain <= 0 {
		c.Drain = DefaultDrain
	}
	if c.WaitFor <= 0 {
		c.WaitFor = DefaultWaitFor
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate checks the configuration without touching the network.
func (c *Config) Validate() error {
	c.defaults()
	if (c.ClosedAccount == "") != (c.Reopen == nil) {
		return &UsageError{"--closed-account and --reopen-cmd go together: the account the team closed, and the command that reopens it"}
	}
	if len(c.URLs) == 0 {
		return &UsageError{"give the target's base URL, like http://127.0.0.1:8080"}
	}
	seen := map[string]bool{}
	for _, u := range c.URLs {
		ep, err := parseEndpoint(u)
		if err != nil {
			return &UsageError{err.Error()}
		}
		if seen[ep.URL] {
			return &UsageError{fmt.Sprintf("%s is given twice", ep.URL)}
		}
		seen[ep.URL] = true
	}
	if err := c.Contract.Validate(); err != nil {
		return &UsageError{err.Error()}
	}
	for _, u := range []User{c.Payer, c.Payee} {
		if u.Token == "" {
			return &UsageError{fmt.Sprintf("no token for %s: give --token %s=TOKEN", u.Name, u.Name)}
		}
		if u.Account == "" {
			return &UsageError{fmt.Sprintf("no account for %s: give --account %s=ID", u.Name, u.Name)}
		}
	}
	if c.Payer.Token == c.Payee.Token {
		return &UsageError{fmt.Sprintf("%s and %s have the same token: the probe needs two different users", c.Payer.Name, c.Payee.Name)}
	}
	ids := map[ID]string{}
	for _, u := range []User{c.Payer, c.Payee, c.Third} {
		if u.Account == "" {
			continue
		}
		if other, dup := ids[u.Account]; dup {
			return &UsageError{fmt.Sprintf("%s and %s both have account %s: the probe needs different accounts", other, u.Name, u.Account)}
		}
		ids[u.Account] = u.Name
	}
	if c.Third.Account == "" {
		return &UsageError{fmt.Sprintf("no third account: give --account %s=ID (any other account; the probe's requests to it must be refused)", c.Third.Name)}
	}
	if (c.DBListen == "") != (c.DBUpstream == "") {
		return &UsageError{"--db-proxy needs both addresses: LISTEN=UPSTREAM, like 127.0.0.1:6433=127.0.0.1:5432"}
	}
	for _, a := range []string{c.DBListen, c.DBUpstream} {
		if _, _, err := net.SplitHostPort(a); a != "" && err != nil {
			return &UsageError{fmt.Sprintf("--db-proxy: %q is not HOST:PORT (%v)", a, err)}
		}
	}
	if c.Amount > 1<<40 {
		return &UsageError{"--amount is too large for a probe"}
	}
	if c.Copies < 2 || c.Copies > 64 {
		return &UsageError{"--copies must be from 2 to 64"}
	}
	if c.Drain < 2 || c.Drain > 64 {
		return &UsageError{"--drain must be from 2 to 64"}
	}
	if c.HangUps > 500 {
		return &UsageError{"--hang-ups must be at most 500"}
	}
	names := map[string]bool{}
	for _, ch := range Checks() {
		names[ch.Name] = true
	}
	for _, n := range append(append([]string{}, c.Only...), c.Skip...) {
		if !names[n] {
			return &UsageError{fmt.Sprintf("unknown check %q; valid names: %s", n, CheckNames())}
		}
	}
	return nil
}

// Guard refuses targets off this machine unless AllowRemote; see guard.
func (c *Config) Guard(ctx context.Context, extra ...string) error {
	for _, u := range c.URLs {
		if err := guard(ctx, "target", u, c.AllowRemote); err != nil {
			return err
		}
	}
	if c.DBUpstream != "" {
		if err := guard(ctx, "--db-proxy's database", "tcp://"+c.DBUpstream, c.AllowRemote); err != nil {
			return err
		}
	}
	for _, u := range extra {
		if err := guard(ctx, "balance source", u, c.AllowRemote); err != nil {
			return err
		}
	}
	return nil
}

// selected returns the checks this run makes, in order.
func (c *Config) selected() []Check {
	only := map[string]bool{}
	for _, n := range c.Only {
		only[n] = true
	}
	skip := map[string]bool{}
	for _, n := range c.Skip {
		skip[n] = true
	}
	var out []Check
	for _, ch := range Checks() {
		if len(only) > 0 && !only[ch.Name] || skip[ch.Name] {
			continue
		}
		out = append(out, ch)
	}
	return out
}

// accounts are the probed accounts, payer first.
func (c *Config) accounts() []ID { return []ID{c.Payer.Account, c.Payee.Account, c.Third.Account} }

// owner returns the user whose credentials read account id.
func (c *Config) owner(id ID) (User, bool) { return Owners(c.Payer, c.Payee, c.Third)(id) }

// Owners is HTTPBalances.Owner for users: the one who owns an account and
// has credentials to read it.
func Owners(users ...User) func(ID) (User, bool) {
	return func(id ID) (User, bool) {
		for _, u := range users {
			if u.Account == id && u.Token != "" {
				return u, true
			}
		}
		return User{}, false
	}
}

// Owner is the user (with credentials) who owns account id, for
// HTTPBalances.Owner.
func (c *Config) Owner(id ID) (User, bool) { return c.owner(id) }

// Key returns the idempotency key the probe uses for the n-th intent of a
// check: a UUID made from the seed, the check and n alone, so that the same
// seed gives the same keys whichever checks run.
func Key(seed uint64, check string, n int) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	h.Write([]byte(check))
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
	s := h.Sum(nil)
	s[6] = s[6]&0x0f | 0x40 // version 4
	s[8] = s[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

// run is the state of one probe run.
type run struct {
	cfg     Config
	eps     []endpoint
	proxies []*faults.Proxy
	// db is the database fault proxy, when --db-proxy is given.
	db *faults.DBProxy

	mu      sync.Mutex
	rng     *rand.Rand
	pending map[string]faults.ConnFault
	nextID  int

	caps Capabilities
	// known is each account's balance as last established (from an exact
	// read, or from a balance in an answer, kept up to date with every
	// acknowledged transfer); absent when unknown.
	known map[ID]int64
	// opening are the balances before the first transfer, when known.
	opening map[ID]int64
	// net is the acknowledged movement of each account since the start.
	net map[ID]int64
	// seen maps each transfer id the target has answered with to the intent
	// that got it first.
	seen map[string]*intent
	// latencies of fresh transfers answered at once, for aiming the
	// hang-ups.
	latencies []time.Duration
	// cut are the intents of the step (the preflight or a check) that an
	// interrupt cut short: their outcome is learnt before the restore.
	cut []*intent
}

// Capabilities is what the target was found to expose.
type Capabilities struct {
	// Balance: answers carry the sender's balance (Contract.BalanceField).
	Balance bool `json:"balanceInAnswers"`
	// Replayed: the target marked a replay with Contract.ReplayedHeader.
	Replayed bool `json:"replayHeader"`
	// Lookup: GET Contract.Lookup answered what became of a key.
	Lookup bool `json:"lookup"`
	// Exact: balances are read from outside the API (Config.Balances).
	Exact bool `json:"exactBalances"`
}

// Run probes the target. The error is for a run that could not judge the
// target at all: a *UsageError (bad configuration, or a target that does not
// speak the contract) or an *UnreachableError; or ctx's, when it was
// interrupted, with the checks finished so far and the restore in the
// Report. Otherwise the Report says what passed and failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &run{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x70726f6265)),
		pending: map[string]faults.ConnFault{},
		known:   map[ID]int64{},
		opening: map[ID]int64{},
		net:     map[ID]int64{},
		seen:    map[string]*intent{},
	}
	for _, u := range cfg.URLs {
		ep, _ := parseEndpoint(u)
		r.eps = append(r.eps, ep)
	}
	if err := cfg.Reach(ctx); err != nil {
		return nil, err
	}
	for i, ep := range r.eps {
		p, err := faults.StartProxy(ep.Addr, cfg.Seed+uint64(i))
		if err != nil {
			r.close()
			return nil, fmt.Errorf("start the fault proxy: %w", err)
		}
		p.Select = r.selectFault
		r.proxies = append(r.proxies, p)
	}
	if cfg.DBListen != "" {
		db, err := faults.StartDBProxy(cfg.DBListen, cfg.DBUpstream)
		if err != nil {
			r.close()
			return nil, &UsageError{err.Error()}
		}
		r.db = db
	}
	defer r.close()

	rep := &Report{Seed: cfg.Seed, Target: cfg.URLs, Contract: cfg.Contract, Started: cfg.Now(), Unchecked: Outside(len(cfg.URLs), "a second URL", cfg.Given)}
	if cfg.ClosedAccount == "" {
		rep.Unchecked = append(rep.Unchecked, closedUnchecked)
	}
	if cfg.Balances != nil {
		rep.Balances = cfg.Balances.Describe()
	}
	start := time.Now()
	pre, err := r.preflight(ctx)
	rep.Preflight = pre
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	rep.Capabilities = r.caps
	r.mu.Lock()
	had, ok := r.opening[cfg.Payer.Account] // before the preflight's transfer, which plannedTotal counts
	r.mu.Unlock()
	if ok && ctx.Err() == nil && had < cfg.plannedTotal() {
		msg := fmt.Sprintf("%s's account %s held %s, and the checks need about %s before the drain: top it up, or give a smaller --amount (now %s)",
			cfg.Payer.Name, cfg.Payer.Account, Kobo(had), Kobo(cfg.plannedTotal()), Kobo(cfg.Amount))
		if !cfg.NoRestore {
			// The preflight's transfer goes back: the run ends before it began.
			rctx, cancel := context.WithTimeout(ctx, cfg.Timeout+cfg.Settle)
			msg += ". The preflight's transfer: " + r.restore(rctx).Result
			cancel()
		}
		return nil, &UsageError{msg}
	}
	for _, ch := range cfg.selected() {
		if ctx.Err() != nil {
			break
		}
		res, ins := r.check(ctx, ch)
		if ctx.Err() != nil {
			r.cut = ins
			break // a check cut short proves nothing either way
		}
		rep.Checks = append(rep.Checks, res)
		if cfg.OnCheck != nil {
			cfg.OnCheck(res)
		}
	}
	if !cfg.NoRestore {
		// Also after an interrupt: the money moved so far goes back. What
		// the interrupted step had in flight is settled first, as its client
		// would (the same key, until a final answer): the target may have
		// finished a transfer whose answer the probe never read. Each within
		// a bound of its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout+cfg.Settle)
		unresolved := r.resolve(rctx, r.cut)
		cancel()
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cfg.Timeout+cfg.Settle)
		rep.Restore = r.restore(rctx)
		cancel()
		if len(unresolved) > 0 {
			rep.Restore.OK = false
			rep.Restore.Result += fmt.Sprintf("; but %d transfer(s) cut short by the interrupt never got a final answer, and the restore could not count them: "+
				"look their keys up on the target (%s)", len(unresolved), strings.Join(unresolved, ", "))
		}
	}
	if ctx.Err() != nil {
		// Interrupted: the report holds what was finished, and the restore.
		return rep, ctx.Err()
	}
	rep.Duration = Duration(time.Since(start))
	r.mu.Lock()
	rep.Capabilities = r.caps
	r.mu.Unlock()
	rep.tally()
	return rep, nil
}

// resolve learns the outcome of intents an interrupt cut short, and takes
// the transfers the target made for them into the money model: a receipt
// already answered, or, for an intent without a final answer, the answer
// to a retry with its key. It returns the keys whose outcome stays unknown.
// An intent that carries no key or no valid credentials moved nothing on a
// target that passed those checks, and is not retried: without a key a retry
// would be a new transfer.
func (r *run) resolve(ctx context.Context, ins []*intent) []string {
	c := &checkRun{run: r, res: &Result{}} // a scratch check: its verdicts are not reported
	var unknown []string
	for _, in := range ins {
		if len(in.Attempts) == 0 || in.Key == "" || in.NoAuth || in.Token != "" {
			continue
		}
		final := false
		for _, a := range in.Attempts {
			final = final || a.Answer != nil && a.Answer.Settled()
		}
		if !final {
			a, out := r.settle(ctx, in, in.Attempts[len(in.Attempts)-1].Copy)
			if out != Settled || a == nil {
				unknown = append(unknown, in.Key)
				continue
			}
		}
		for _, a := range in.receipts() {
			// The amount, not the balance the answer carries: a replay's
			// balance is from the moment the transfer was made, which may
			// be before transfers the model already counts.
			b := *a
			b.Balance = nil
			c.debit(receipt{in, &b})
		}
	}
	return unknown
}

func (r *run) close() {
	for _, p := range r.proxies {
		_ = p.Close()
	}
	if r.db != nil {
		_ = r.db.Close()
	}
	if r.cfg.Balances != nil {
		_ = r.cfg.Balances.Close()
	}
}

// Reach connects to every copy of the target once: a target that cannot be
// reached is not a failed check, and must not look like one.
func (c *Config) Reach(ctx context.Context) error {
	c.defaults()
	for _, u := range c.URLs {
		ep, err := parseEndpoint(u)
		if err != nil {
			return &UsageError{err.Error()}
		}
		if err := speaksHTTP(ctx, ep, c.Timeout); err != nil {
			return err
		}
	}
	return nil
}

// selectFault is each proxy's Select: the fault the probe attached to this
// request, by the id in its fault header (removed before the server sees it).
func (r *run) selectFault(_ int, req *http.Request) faults.ConnFault {
	id := req.Header.Get(faultHeader)
	if id == "" {
		return nil
	}
	req.Header.Del(faultHeader)
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.pending[id]
	delete(r.pending, id)
	return f
}

// attach registers f for one request and returns the header value that
// selects it.
func (r *run) attach(f faults.ConnFault) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextID++
	id := fmt.Sprint(r.nextID)
	r.pending[id] = f
	return id
}

// jitter draws from the run's seeded generator.
func (r *run) float() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64()
}

func (r *run) noteLatency(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.latencies) < 200 {
		r.latencies = append(r.latencies, d)
	}
}

// typicalLatency is the median time from a fresh transfer's last byte to
// its answer, so far.
func (r *run) typicalLatency() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.latencies) == 0 {
		return 5 * time.Millisecond
	}
	l := append([]time.Duration(nil), r.latencies...)
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[len(l)/2]
}

// readBalances reads the exact source, if any.
func (r *run) readBalances(ctx context.Context) (map[ID]int64, error) {
	if r.cfg.Balances == nil {
		return nil, errors.New("no balance source")
	}
	return r.cfg.Balances.Read(ctx, r.cfg.accounts())
}
