package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/api/client"
	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/probe"
)

// Target is someone else's transfer API, driven from outside (chaos
// --target): the lesson's server.js, a team's staging service, bank-sim
// serve. The run knows it only through probe's contract, the users it is
// given and, optionally, a way to read balances; it cannot create accounts,
// freeze them, stop the target's clock or crash it, so only the network's
// faults are injected (TargetFaultKinds) and only the rules a black box can
// judge are checked.
type Target struct {
	// URLs are the target's base URLs: one server, or copies of one service
	// sharing its database (each attempt lands on one the seed picks, as
	// behind a load balancer).
	URLs     []string       `json:"urls"`
	Contract probe.Contract `json:"contract"`
	// Users are who the run acts as: Users[0] and Users[1] pay each other
	// (the lesson's Ada and Bola); Users[2] owns the account a key reused
	// for another recipient names, and is never sent money. Tokens are not
	// saved with a history.
	Users []probe.User `json:"users"`
	// Amount is the smallest amount of a transfer, in kobo; each intent's is
	// from Amount to twice it, drawn from the seed.
	Amount int64 `json:"amountKobo"`
	// Timeout bounds every request; Settle how long healing retries one
	// unknown intent.
	Timeout time.Duration `json:"timeoutNs"`
	Settle  time.Duration `json:"settleNs"`
	// Balances, when set, reads the accounts from outside the transfer
	// endpoint, for the money rules (conservation, no negative balance,
	// each account moved by exactly the acknowledged transfers).
	Balances probe.Balances `json:"-"`
	// BalancesFrom says where Balances reads (kept in the history: a
	// re-check knows whether money was read).
	BalancesFrom string `json:"balances,omitempty"`
	// AllowRemote lets the target be another machine.
	AllowRemote bool `json:"allowRemote,omitempty"`
	// DBListen and DBUpstream, when set, put bank-sim's database fault
	// proxy on DBListen in front of the target's PostgreSQL at DBUpstream
	// (--db-proxy; the target's database URL points at DBListen): seeded
	// intents fail the next COMMIT (Config.DBFault). LockTTL is how long
	// the target holds a key's lock (--lock-ttl): healing retries an
	// intent for Settle and LockTTL, and a 409 past them is a key left
	// claimed by the failure.
	DBListen   string        `json:"dbListen,omitempty"`
	DBUpstream string        `json:"dbUpstream,omitempty"`
	LockTTL    time.Duration `json:"lockTtlNs,omitempty"`
	// Restart, when set, restarts the target once (--restart, run by
	// probe.ShellRestart): the client of intent Config.CrashIntent, once it
	// has its answer, restarts the target, waits up to WaitFor until it
	// answers again, and sends the intent again with its key, which must be
	// replayed; every key answered before the restart and retried after it
	// must be. RestartCommand is the command, kept with the history.
	Restart        probe.Restarter `json:"-"`
	RestartCommand string          `json:"restart,omitempty"`
	WaitFor        time.Duration   `json:"waitForNs,omitempty"`
	// Given names the flags given that make a class of defect checkable
	// (probe.FlagRestart, probe.FlagDBProxy): the report lists the others
	// as unchecked.
	Given []string `json:"given,omitempty"`
}

// DefaultTargetSettle is how long healing retries one unknown intent of a
// target run: a key left in progress by a request that was cut short must be
// released, or taken over, within it.
const DefaultTargetSettle = 10 * time.Second

// DefaultTargetAmount is ₦100, the probe's: small, and far from any balance.
const DefaultTargetAmount = probe.DefaultAmount

// TargetFaultKinds are the faults a run can inject into someone else's
// server: those of the network between its clients and it. The others
// happen inside a server (crash-after-claim, fail-before-commit, clock-jump,
// deadlock, expire-mid-write, freeze) or beyond it (the side effects'), and
// cannot be made to happen in a server that is not bank-sim's.
func TargetFaultKinds() []string {
	return []string{FaultDisconnect, FaultDropRequest, FaultDuplicate, FaultLate, FaultLoseResponse, FaultSlow}
}

// ServerSideFaultKinds are the fault kinds a target run cannot inject.
func ServerSideFaultKinds() []string {
	var out []string
	for _, k := range FaultKinds() {
		if !slices.Contains(TargetFaultKinds(), k) {
			out = append(out, k)
		}
	}
	return out
}

// TargetRates fire on about a quarter of the attempts, as DefaultRates do,
// spread over the network's faults only.
func TargetRates() Rates {
	return Rates{
		FaultLoseResponse: 0.07,
		FaultDropRequest:  0.04,
		FaultDuplicate:    0.06,
		FaultLate:         0.04,
		FaultSlow:         0.03,
		FaultDisconnect:   0.04,
	}
}

// Validate says what is wrong with t, if anything, without touching the
// network.
func (t *Target) Validate() error {
	if len(t.URLs) == 0 {
		return &probe.UsageError{Msg: "give the target's base URL, like --target http://127.0.0.1:8080"}
	}
	if len(t.Users) < 3 {
		return &probe.UsageError{Msg: "a target run needs three users: two who pay each other and the owner of a third account"}
	}
	pc := t.probeConfig()
	if err := pc.Validate(); err != nil {
		return err
	}
	if t.Amount <= 0 || t.Amount > 1<<40 {
		return &probe.UsageError{Msg: fmt.Sprintf("the amount %d kobo is not one a chaos run can send", t.Amount)}
	}
	return nil
}

// probeConfig is t as a probe's configuration, for what the two share: the
// validation of the contract and the users, the loopback guard and the
// first connection.
func (t *Target) probeConfig() probe.Config {
	return probe.Config{URLs: t.URLs, Contract: t.Contract, Payer: t.Users[0], Payee: t.Users[1], Third: t.Users[2],
		Amount: t.Amount, Timeout: t.Timeout, AllowRemote: t.AllowRemote, DBListen: t.DBListen, DBUpstream: t.DBUpstream, LockTTL: t.LockTTL}
}

// Guard refuses a target (or a balance source at extra) off this machine
// unless AllowRemote, as probe does.
func (t *Target) Guard(ctx context.Context, extra ...string) error {
	pc := t.probeConfig()
	return pc.Guard(ctx, extra...)
}

// Reach connects to each of the target's URLs once, as probe does: a
// target that cannot be reached is a *probe.UnreachableError, not a run.
func (t *Target) Reach(ctx context.Context) error {
	pc := t.probeConfig()
	return pc.Reach(ctx)
}

// layout is the target's bank as the run sees it: Users[k] owns the account
// numbered k+1, the first two are the ones that pay, and the third is the
// spare recipient of a reused key. Balances are not known in advance.
func (t *Target) layout(c Config) *layout {
	l := &layout{byID: map[int64]bank.Account{}, owned: map[int64][]int64{}, edges: map[int]int{}, span: c.Intents, spare: 3}
	if l.span <= 0 {
		l.span = 200
	}
	for k, u := range t.Users {
		id := int64(k + 1)
		a := bank.Account{ID: id, OwnerID: id, Holder: fmt.Sprintf("%s's account %s", u.Name, u.Account), Status: "active"}
		l.accounts = append(l.accounts, a)
		l.byID[id] = a
		l.owned[id] = []int64{id}
		if k < 2 {
			l.hot = append(l.hot, id)
			l.users = append(l.users, id)
		}
	}
	return l
}

// ordinary is intent i of a target run: one of the two payers sends the
// other from Amount to twice it.
func (t *Target) ordinary(c Config, l *layout, i int) Planned {
	r := rng(c.Seed, saltIntent, uint64(i), 0)
	p := Planned{Label: fmt.Sprintf("intent-%d", i), Key: fmt.Sprintf("chaos-%016x-%08x", r.Uint64(), i)}
	from := l.hot[r.IntN(len(l.hot))]
	p.UserID = from
	p.Request = bank.TransferRequest{From: from, To: l.otherHot(r, from), AmountKobo: t.Amount + r.Int64N(t.Amount)}
	return p
}

// user is the user numbered id (1-based), and account the account.
func (t *Target) user(id int64) probe.User { return t.Users[id-1] }

func (t *Target) account(id int64) probe.ID {
	if id >= 1 && int(id) <= len(t.Users) {
		return t.Users[id-1].Account
	}
	return probe.ID(fmt.Sprint(id))
}

// transfer is a planned request in the target's own account ids.
func (t *Target) transfer(r bank.TransferRequest) probe.Transfer {
	return probe.Transfer{From: t.account(r.From), To: t.account(r.To), Amount: r.AmountKobo}
}

// Money is what the first n intents of cfg move if the target accepts them
// all: the total each payer sends, by user name. A request sent without its
// key first (Planned.Keyless) counts too: a target that accepts it makes a
// transfer of its own.
func (t *Target) Money(cfg Config) map[string]int64 {
	out := map[string]int64{}
	plan := cfg.Plan(cfg.WithDefaults().Intents).Intents
	for i, p := range plan {
		if p.Reuse != "" { // a key reused for another request must be refused
			continue
		}
		out[t.user(p.UserID).Name] += p.Request.AmountKobo
		if p.Funds { // either of the two may fund (engine.overdraw)
			out[t.user(plan[i-1].UserID).Name] += p.Request.AmountKobo
		}
		if p.Keyless {
			out[t.user(p.UserID).Name] += p.Request.AmountKobo
		}
	}
	return out
}

// read reads the balances of the accounts the source can read, in order
// (a GET source reads only those whose owner's token it has), as the run's
// numbered accounts; nil when there is no source. want, when set, are the
// accounts a later read must give again.
func (t *Target) read(ctx context.Context, want []bank.Account) ([]bank.Account, error) {
	if t.Balances == nil {
		return nil, nil
	}
	var ids []probe.ID
	for _, u := range t.Users {
		ids = append(ids, u.Account)
	}
	got, err := t.Balances.Read(ctx, ids)
	if err != nil {
		return nil, err
	}
	var out []bank.Account
	for k, id := range ids {
		b, ok := got[id]
		if !ok {
			continue
		}
		n := int64(k + 1)
		out = append(out, bank.Account{ID: n, OwnerID: n, Holder: fmt.Sprintf("%s's account %s", t.Users[k].Name, id), Status: "active", BalanceKobo: b})
	}
	if len(out) < 2 {
		return nil, &probe.UsageError{Msg: fmt.Sprintf("the balance source gave the balances of %d of the accounts; it must give at least the two that pay (%s's and %s's)", len(out), t.Users[0].Name, t.Users[1].Name)}
	}
	if want != nil && len(out) != len(want) {
		return nil, fmt.Errorf("the balance source gave %d balances, and %d before", len(out), len(want))
	}
	return out, nil
}

// balances are the balances of accounts, in order.
func balances(accounts []bank.Account) []int64 {
	out := make([]int64, len(accounts))
	for k, a := range accounts {
		out[k] = a.BalanceKobo
	}
	return out
}

// consistent reports whether the balance source reads every account in one
// snapshot: only then can it audit while transfers run.
func (t *Target) consistent() bool {
	s, ok := t.Balances.(interface{ Consistent() bool })
	return ok && s.Consistent()
}

// runTarget is RunWith for Config.Target: the intents go to the target
// through a fault proxy in front of each of its URLs, with the retrying
// client in the target's contract; healing retries each unknown intent with
// its key; the balances, when there is a source, are read before, during
// (if it reads one snapshot) and after.
func runTarget(ctx context.Context, cfg Config, opts Options) (*History, error) {
	t := cfg.Target
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if err := t.Reach(ctx); err != nil {
		return nil, err
	}
	// A redirect ends the run: its requests stay on the address the user
	// gave (none is followed), and the rest of the run would judge answers
	// that are not the target's.
	outer := ctx
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	redirected := func(err error) error {
		var re *client.RedirectError
		if outer.Err() == nil && errors.As(context.Cause(ctx), &re) {
			return &probe.UsageError{Msg: re.Error() + "; nothing was judged"}
		}
		return err
	}
	e := &engine{cfg: cfg, lay: cfg.layout(), crash: freeCrash{&faults.CrashAfterClaim{}}, fired: map[string]int{}, server: map[string]int{}, late: (*sched)(nil).newGroup(), bound: attemptTimeout}
	if err := e.fresh(ctx); err != nil {
		return nil, err
	}
	rig, err := startTargetRig(e)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	rig.http.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		err := client.RefuseRedirect(req, via)
		abort(err)
		return err
	}
	e.rig = rig
	if t.DBListen != "" {
		if rig.db, err = faults.StartDBProxy(t.DBListen, t.DBUpstream); err != nil {
			return nil, &probe.UsageError{Msg: fmt.Sprintf("--db-proxy: %v", err)}
		}
		defer func() { _ = rig.db.Close() }()
	}
	opening, err := t.read(ctx, nil)
	if err != nil {
		return nil, err
	}
	e.start = time.Now()
	e.intents = make([]*Intent, cfg.Intents)

	auditCtx, stopAudit := context.WithCancel(ctx)
	var audits sync.WaitGroup
	if opening != nil && t.consistent() {
		audits.Add(1)
		go func() {
			defer audits.Done()
			e.auditTarget(auditCtx, opening)
		}()
	}
	e.drive(ctx, opts.Progress, time.Time{}, -1)
	err = e.settleTarget(ctx)
	stopAudit()
	audits.Wait()
	if err != nil {
		return nil, redirected(err)
	}
	if err := redirected(nil); err != nil {
		return nil, err
	}
	// Every exchange of the proxies ends (the copies of a duplicate count
	// what they were answered) before the history takes the counts.
	rig.close()
	h := &History{Seed: cfg.Seed, Config: cfg, Opening: e.lay.accounts, Audits: e.audits, Fired: e.fired, Server: e.server, Restarts: e.restarts}
	h.Intents = make([]Intent, len(e.intents))
	for i, in := range e.intents {
		h.Intents[i] = *in
	}
	if err := t.spoken(h); err != nil {
		return nil, err
	}
	if opening != nil {
		// Only the accounts the source reads: the money rules are on them.
		h.Opening = opening
		if h.Final.Accounts, err = t.read(ctx, opening); err != nil {
			return nil, fmt.Errorf("read the balances after the run: %w", err)
		}
	}
	h.Duration = time.Since(e.start)
	return h, nil
}

// spoken refuses to judge a target that never named a transfer: a wrong
// token, account, path or id member makes every answer a refusal (or a
// success without an id), which says nothing about its keys.
func (t *Target) spoken(h *History) error {
	statuses := map[int]int{}
	for _, in := range h.Intents {
		for _, a := range in.Attempts {
			if a.Seen == SeenUnknown {
				continue
			}
			if t.answer(a).Receipt() {
				return nil
			}
			statuses[a.Status]++
		}
	}
	var seen []string
	for _, st := range []int{200, 201, 400, 401, 403, 404, 405, 415, 422} {
		if statuses[st] > 0 {
			seen = append(seen, fmt.Sprintf("%d ×%d", st, statuses[st]))
		}
	}
	return &probe.UsageError{Msg: fmt.Sprintf("not one of the %d intents was answered with a transfer (a 2xx with member %q): the answers were %s. "+
		"Check --token, --account, --path, the body's names (--from-field, --to-field, --amount-field) and --id-field; nothing was judged",
		len(h.Intents), t.Contract.IDField, orNone(strings.Join(seen, ", ")))}
}

// fresh refuses a run whose first key the target already knows, when it
// can look keys up: an earlier run with the same seed used them, and its
// stored answers would be replayed as if they were this run's.
func (e *engine) fresh(ctx context.Context) error {
	t := e.cfg.Target
	if t.Contract.Lookup == "" {
		return nil
	}
	p := e.plan(0)
	req, err := t.Contract.NewLookup(t.URLs[0], t.user(p.UserID), p.Key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	res, err := client.NewHTTP(t.Timeout, nil).Do(req.WithContext(ctx))
	var re *client.RedirectError
	if errors.As(err, &re) {
		return &probe.UsageError{Msg: re.Error() + " (asked for the key of intent 0 with --lookup); nothing was judged"}
	}
	if err != nil {
		return nil // no lookup: the run finds out from the answers
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	_ = res.Body.Close()
	if err == nil && t.Contract.Read(res.StatusCode, res.Header, body).Receipt() {
		return &probe.UsageError{Msg: fmt.Sprintf("%s already knows the key of intent 0 (%s): a run with --seed %d was made against it before, and its stored answers would be replayed as this run's. Run with another --seed", t.URLs[0], p.Key, e.cfg.Seed)}
	}
	return nil
}

// overdraw decides intent i (Planned.Overdraw) and its funding follower
// when i is sent, from the balances read from the balance source now: the
// head asks overdrawBy times the target's Amount more than its payer
// holds, and the follower pays the payer FundsAmount. A run's balances
// wander (and each funded refusal moves FundsAmount one way), so the
// planned funder may by now hold less than it is to send: its refusal
// would leave the head's key never retried after money arrived. When it
// holds less than that and the overdraw besides (room for what it pays
// meanwhile), and the planned payer holds that much, the two swap places. Without a balance source, or when the read fails, the
// planned amount is sent, and no refusal for funds is provoked.
func (e *engine) overdraw(ctx context.Context, i int, p Planned) Planned {
	t := e.cfg.Target
	// The target may be down for a moment (a --restart, a fault on the
	// balance source): the read is retried, bounded by --settle, before
	// the planned amount is sent instead and the case goes unreached.
	var got []bank.Account
	var err error
	for deadline := time.Now().Add(max(t.Settle, time.Second)); ; {
		if got, err = t.read(ctx, nil); err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err != nil {
		return p
	}
	held := map[int64]int64{}
	for _, a := range got {
		held[a.ID] = a.BalanceKobo
	}
	from, ok := held[p.Request.From]
	if !ok {
		return p
	}
	f := e.cfg.intentIn(e.lay, i+1)
	if need := FundsAmount(t) + overdrawBy*t.Amount; f.Funds && held[f.Request.From] < need && from >= need {
		p.UserID, f.UserID = f.UserID, p.UserID
		p.Request.From, f.Request.From = f.Request.From, p.Request.From
		p.Request.To, f.Request.To = f.Request.From, p.Request.From
		from = held[p.Request.From]
	}
	p.Request.AmountKobo = from + overdrawBy*t.Amount
	e.mu.Lock()
	if e.decided == nil {
		e.decided = map[int]Planned{}
	}
	e.decided[i] = p
	if f.Funds {
		e.decided[i+1] = f
	}
	e.mu.Unlock()
	return p
}

// TargetRestart is a restart of the target during a run (--restart): when
// it ran, what it printed, and when the target answered again.
type TargetRestart struct {
	Intent int   `json:"intent"`
	AtNs   int64 `json:"atNs"`
	// EndNs is when the target answered again (or the wait gave up).
	EndNs  int64  `json:"endNs"`
	Output string `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// restartTarget restarts the target after intent i's answer and waits
// until every URL answers again, bounded by WaitFor.
func (e *engine) restartTarget(ctx context.Context, i int) bool {
	t := e.cfg.Target
	r := TargetRestart{Intent: i, AtNs: e.since()}
	out, err := t.Restart(ctx)
	r.Output = out
	if err == nil {
		err = t.ready(ctx)
	}
	if err != nil {
		r.Error = err.Error()
	}
	r.EndNs = e.since()
	e.mu.Lock()
	e.restarts = append(e.restarts, r)
	e.mu.Unlock()
	return err == nil
}

// ready polls the target's URLs until each answers, bounded by WaitFor.
func (t *Target) ready(ctx context.Context) error {
	deadline := time.Now().Add(t.WaitFor)
	wait := 10 * time.Millisecond
	for {
		err := t.Reach(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("the target did not answer within --wait-for %s after the restart: %w", t.WaitFor, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// Database faults of a target run (--db-proxy), as History.Fired counts
// them.
const (
	FaultDBCut        = "db-cut-before-commit"
	FaultDBLostCommit = "db-commit-answer-lost"
)

// dbFaultKind is f's name among the run's faults.
func dbFaultKind(f faults.DBFault) string {
	if f == faults.DBCutBeforeCommit {
		return FaultDBCut
	}
	return FaultDBLostCommit
}

// armDB arms f (0: none) for the next COMMIT through the database proxy,
// after counting the fault armed before it if it fired.
func (r *httpRig) armDB(f faults.DBFault) {
	if r.db == nil {
		return
	}
	r.dbMu.Lock()
	defer r.dbMu.Unlock()
	if r.dbArmed != 0 && r.db.Disarm() != "" {
		r.e.mu.Lock()
		r.e.fired[dbFaultKind(r.dbArmed)]++
		r.e.mu.Unlock()
	}
	r.dbArmed = f
	if f != 0 {
		r.db.Arm(f, 1)
	}
}

// settleTarget ends a target run, faults off: requests still on their way
// arrive, every unknown intent is retried with its key until it settles,
// and the key reuses that waited for their first intent are sent.
func (e *engine) settleTarget(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.rig.healing.Store(true)
	e.rig.armDB(0)
	if err := e.late.wait(ctx, drainTimeout, "requests still on their way to the target (late ones)"); err != nil {
		return err
	}
	if err := e.heal(ctx); err != nil {
		return err
	}
	return e.sendDeferred(ctx)
}

// auditTarget reads every balance in one snapshot each AuditEvery (at least
// 50 ms: the source is someone else's database) until ctx ends.
func (e *engine) auditTarget(ctx context.Context, opening []bank.Account) {
	t := time.NewTicker(max(e.cfg.AuditEvery, 50*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := e.since()
		b, err := e.cfg.Target.read(ctx, opening)
		if err != nil {
			continue // a missed audit proves nothing either way
		}
		e.mu.Lock()
		e.audits = append(e.audits, Snapshot{AtNs: at, Balances: balances(b)})
		e.mu.Unlock()
	}
}

// startTargetRig puts a fault proxy in front of each of the target's URLs.
// The proxy decides each attempt's fault from the simulator's headers, as
// in an HTTP run, and removes them before the target sees the request.
func startTargetRig(e *engine) (*httpRig, error) {
	t := e.cfg.Target
	r := &httpRig{e: e, index: map[string]int{}, tokens: map[int64]string{}, target: t}
	for k, u := range t.Users {
		r.tokens[int64(k+1)] = u.Token
	}
	r.http = client.NewHTTP(t.Timeout, &http.Transport{DisableKeepAlives: true})
	for inst, raw := range t.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			r.close()
			return nil, &probe.UsageError{Msg: fmt.Sprintf("%q is not a URL", raw)}
		}
		port := u.Port()
		if port == "" {
			port = "80"
		}
		p, err := faults.StartProxy(u.Hostname()+":"+port, e.cfg.Seed+uint64(inst))
		if err != nil {
			r.close()
			return nil, err
		}
		p.Select = func(n int, req *http.Request) faults.ConnFault {
			f := r.connFault(n, req)
			req.Header.Del(api.HeaderIntent)
			req.Header.Del(api.HeaderAttempt)
			req.Host = u.Host
			return f
		}
		base := p.URL() + strings.TrimRight(u.EscapedPath(), "/")
		r.proxies = append(r.proxies, p)
		r.urls = append(r.urls, base)
		r.index[base] = inst
	}
	return r, nil
}

// targetClient makes c speak the target's contract for p: attempt n is
// written reordered when reordered(p, n) says so.
func (r *httpRig) targetClient(c *client.Client, p Planned) {
	t := r.target
	u := t.user(p.UserID)
	c.ReplayedHeader = t.Contract.ReplayedHeader
	sent := 0 // Send makes its attempts one after another
	c.Request = func(ctx context.Context, base string, in client.Intent) (*http.Request, error) {
		sent++
		build := t.Contract.NewRequest
		if r.reordered(p, max(c.FirstAttempt, 1)+sent-1) {
			build = t.Contract.NewReorderedRequest
		}
		req, err := build(base, u, in.Key, t.transfer(in.Transfer))
		if err != nil {
			return nil, err
		}
		return req.WithContext(ctx), nil
	}
}

// reordered reports whether attempt n of p goes to a target with the
// body's members in another order (Planned.Reorder): every attempt after
// the first.
func (r *httpRig) reordered(p Planned, n int) bool {
	return r.target != nil && p.Reorder && n > 1
}

// sendKeyless sends p once without its key (Planned.Keyless), no fault, on
// the server the seed picks for it, and returns what it was told (nil when
// the request could not be made).
func (r *httpRig) sendKeyless(ctx context.Context, i int, p Planned) *Attempt {
	e, t := r.e, r.target
	u := t.user(p.UserID)
	c := r.client(i, p, []string{r.urls[e.cfg.Instance(i, 0)]}, 1, nil)
	c.Request = func(ctx context.Context, base string, in client.Intent) (*http.Request, error) {
		req, err := t.Contract.NewRequest(base, u, "", t.transfer(in.Transfer))
		if err != nil {
			return nil, err
		}
		return req.WithContext(ctx), nil
	}
	// A 502 or 503 says the target was not there to judge it (a restart
	// under way, a gateway without a server): sent again, bounded by
	// --settle, so that no-key judges the target's own answer (the zoo's
	// memory-keys met a restart's 502 here, 2 runs in 8).
	deadline := time.Now().Add(t.Settle)
	for k := 0; ; k++ {
		start := e.since()
		// The client wants a key to send; the request leaves it out. No
		// label: the proxy gives a request it cannot place no fault.
		out, err := c.Send(ctx, client.Intent{Key: p.Key, Transfer: p.Request})
		if err != nil || len(out.Attempts) == 0 {
			return nil
		}
		a := r.attemptOf(out.Attempts[0], 0, PhaseKeyless, "", start, e.since())
		a.Key = ""
		if (a.Status != http.StatusBadGateway && a.Status != http.StatusServiceUnavailable) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return &a
		}
		time.Sleep(min(10*time.Millisecond<<min(k, 10), 500*time.Millisecond))
	}
}

// pause waits before healing's next try of an intent: briefly for bank-sim's
// own servers, longer for a target, whose work may take real time (k is the
// try, from 0: 10 ms doubling to 500 ms, some 13 s over HealAttempts).
func (r *httpRig) pause(a Attempt, k int) {
	if r.target == nil || a.Seen != SeenUnknown {
		backoff(a)
		return
	}
	time.Sleep(min(10*time.Millisecond<<min(k, 10), 500*time.Millisecond))
}
