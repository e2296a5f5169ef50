package scenarios

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/idem/mistakes"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Run is what a phase works with: its fresh bank, its seed, and the means to
// tell the story and record what clients were told.
type Run struct {
	DB   *pgxpool.Pool
	Seed uint64

	mu           sync.Mutex
	rng          *rand.Rand
	start        time.Time
	held         func() time.Duration // how long the story was held since start (Options.Held)
	obs          Observer
	opening      []bank.Account
	clock        *faults.Clock
	clockStart   time.Time
	events       []Event
	expectations []Expectation
	told         []bank.Told
	cleanups     []func()
	extra        []bank.Check    // the scenario's own invariants, judged with the five
	done         <-chan struct{} // closed when the run is interrupted
	bug          *mistakes.Bug   // switched on in every handler and client of the phase

	amount     int64             // the story's amount, or the experiment's
	faults     []FaultSpec       // a live experiment's faults, for every network and proxy
	labels     map[string]string // intent → its name for people
	deliveries int               // numbers the requests, for pictures
	networks   []*faults.Network
	proxies    []*faults.Proxy
	httpIDs    map[string]int // intent#attempt → delivery, over HTTP
	keyIDs     map[string]int // key#attempt → delivery, over HTTP
	snapshots  bool
	seen       map[int64]bool // transfers already told, for committed
	closeDB    func()         // closes a bank the phase brought itself (UseDB)
	dbLane     string         // where servers' database work is drawn (DatabaseAt)
	prepared   any            // what the story's Prepare made
}

// Prepared is what the story's Prepare returned (nil without one).
func (r *Run) Prepared() any { return r.prepared }

// DatabaseAt draws the servers' work in the database from now on at lane
// (the server that serves it: "primary", then the promoted "standby")
// instead of "database".
func (r *Run) DatabaseAt(lane string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dbLane = lane
}

func (r *Run) databaseLane() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dbLane == "" {
		return "database"
	}
	return r.dbLane
}

// UseDB makes db the phase's bank from now on, in place of the one it was
// given: a story that needs a database of its own making (a primary and its
// standby, say) builds the lesson's bank there and hands it over. The
// phase's ledger is read from db, and closeDB runs once it has been, on
// every way out of the phase.
func (r *Run) UseDB(db *pgxpool.Pool, closeDB func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closeDB != nil {
		r.closeDB()
	}
	r.DB, r.closeDB = db, closeDB
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x62616e6b)) }

// Clock starts the phase's movable clock at t and returns it; events from
// then on carry the clock's offset. The phase's database follows it: its
// clock, on which locks expire and keys age, reads t now and moves with
// every Advance.
func (r *Run) Clock(t time.Time) *faults.Clock {
	r.clock = faults.NewClock(t)
	r.clockStart = t
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.clock.Follow(ctx, r.DB); err != nil {
		r.Expect(false, "to set the database's clock (%v)", err)
	}
	return r.clock
}

// Defer registers f to run when the phase ends, before the ledger is read.
func (r *Run) Defer(f func()) { r.cleanups = append(r.cleanups, f) }

func (r *Run) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func (r *Run) emit(e Event) {
	select {
	case <-r.done:
		// Interrupted: what follows is the interruption's echo (failed
		// queries, unmet expectations), not the story.
		return
	default:
	}
	r.mu.Lock()
	e.Elapsed = time.Since(r.start)
	if r.held != nil {
		e.Elapsed -= r.held()
	}
	if r.clock != nil {
		e.Clock = "+" + Dur(r.clock.Now().Sub(r.clockStart))
	}
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.obs.Event(e)
}

// Step narrates: what the story's people do, in the lesson's words. The
// story mode prints every step.
func (r *Run) Step(format string, args ...any) {
	r.emit(Event{Kind: KindStep, Text: fmt.Sprintf(format, args...)})
}

// Server narrates what happened where the client cannot see: printed with
// --verbose and in the pictures, not in the story.
func (r *Run) Server(format string, args ...any) {
	r.emit(Event{Kind: KindServer, Text: fmt.Sprintf(format, args...), Lane: "server"})
}

// ServerAt is Server for a named server's lane ("server A").
func (r *Run) ServerAt(lane, format string, args ...any) {
	r.emit(Event{Kind: KindServer, Text: fmt.Sprintf(format, args...), Lane: lane})
}

// Checks records expectations from one source: the lesson's facts
// (Run.Lesson) or bank-sim's own checks (Run's own Expect…).
type Checks struct {
	r      *Run
	source string
}

// Lesson returns the checks of facts that the lesson itself states (its
// numbers, status codes and error codes), which the output marks "as the
// lesson says". Anything else is bank-sim's own check: use r.Expect.
func (r *Run) Lesson() Checks { return Checks{r, SourceLesson} }

// Expect records one of bank-sim's own expectations and whether it was met.
// For a fact the lesson states, use r.Lesson().Expect.
func (r *Run) Expect(ok bool, format string, args ...any) bool {
	return Checks{r, SourceBankSim}.Expect(ok, format, args...)
}

// ExpectBalances checks the balances of Ada, Bola and Chidi, in kobo, as
// bank-sim's own check; r.Lesson().ExpectBalances for the lesson's numbers.
func (r *Run) ExpectBalances(ctx context.Context, ada, bola, chidi int64) {
	Checks{r, SourceBankSim}.ExpectBalances(ctx, ada, bola, chidi)
}

// ExpectTransfers checks how many transfers the ledger holds, as bank-sim's
// own check; r.Lesson().ExpectTransfers for the lesson's numbers.
func (r *Run) ExpectTransfers(ctx context.Context, n int) {
	Checks{r, SourceBankSim}.ExpectTransfers(ctx, n)
}

// Expect records an expectation from c's source and whether it was met.
func (c Checks) Expect(ok bool, format string, args ...any) bool {
	r := c.r
	text := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.expectations = append(r.expectations, Expectation{Text: text, OK: ok, Source: c.source})
	r.mu.Unlock()
	r.emit(Event{Kind: KindExpect, Text: text, OK: &ok, Source: c.source})
	return ok
}

// ExpectBalances checks the balances of Ada, Bola and Chidi, in kobo.
func (c Checks) ExpectBalances(ctx context.Context, ada, bola, chidi int64) {
	l, err := bank.ReadLedger(ctx, c.r.DB)
	if err != nil {
		c.Expect(false, "to read the balances (%v)", err)
		return
	}
	got := [3]int64{}
	for i := range got {
		got[i], _ = l.Balance(int64(i + 1))
	}
	want := [3]int64{ada, bola, chidi}
	text := fmt.Sprintf("Ada %s, Bola %s, Chidi %s", bank.Naira(ada), bank.Naira(bola), bank.Naira(chidi))
	if got != want {
		text += fmt.Sprintf(" (found Ada %s, Bola %s, Chidi %s)", bank.Naira(got[0]), bank.Naira(got[1]), bank.Naira(got[2]))
	}
	c.Expect(got == want, "%s", text)
}

// ExpectTransfers checks how many transfers the ledger holds.
func (c Checks) ExpectTransfers(ctx context.Context, n int) {
	var got int
	err := c.r.DB.QueryRow(ctx, "SELECT count(*) FROM transfers").Scan(&got)
	text := plural(n, "transfer", "transfers") + " in the ledger"
	if err != nil || got != n {
		text += fmt.Sprintf(" (found %d)", got)
	}
	c.Expect(err == nil && got == n, "%s", text)
}

// Invariant adds a check of the scenario's own to the phase's invariants. It
// is judged like the five that every phase gets: a protected phase must keep
// it, and breaking it is what a control is for.
func (r *Run) Invariant(name string, ok bool, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.extra = append(r.extra, bank.Check{Name: name, OK: ok, Detail: detail})
}

// Told records what a client was told, for the "clients were told the truth"
// invariant. An intent not yet named (Label) gets a name from its request:
// "Ada's ₦10,000 to Bola".
func (r *Run) Told(t bank.Told) {
	r.mu.Lock()
	r.told = append(r.told, t)
	if r.labels == nil {
		r.labels = map[string]string{}
	}
	if _, ok := r.labels[t.Intent]; !ok && t.Intent != "" && t.Request.AmountKobo > 0 {
		r.labels[t.Intent] = HumanIntent(t.UserID, t.Request)
	}
	r.mu.Unlock()
}

// Answered records an answer that is not a transfer's (mark-shipped's
// markShipped): the caller's lane, the call ("markShipped(1)") and what it
// returned. The story tells it like an attempt, and compare lines it up with
// the other run's; the transfer invariants do not judge it (a story whose
// answers need judging adds an Invariant of its own).
func (r *Run) Answered(caller, from, call, answer string) {
	r.emit(Event{Kind: KindAttempt, From: from, To: caller, Text: call + ": " + answer})
}

// Label names an intent for people: the output says human instead of the
// intent's label (which the ledger and --json keep).
func (r *Run) Label(intent, human string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.labels == nil {
		r.labels = map[string]string{}
	}
	r.labels[intent] = human
}

// HumanIntent names a transfer for people: "Ada's ₦10,000 to Bola".
func HumanIntent(user int64, req bank.TransferRequest) string {
	return fmt.Sprintf("%s's %s to %s", userName(user), bank.Naira(req.AmountKobo), holder(req.To))
}

// Amount is the story's amount in kobo (Scenario.Amount), or the one a live
// experiment asked for instead (scenario --amount). A story with an amount
// sends it with this, so that the experiment really changes it.
func (r *Run) Amount() int64 {
	if r.amount > 0 {
		return r.amount
	}
	return AdaPaysBola.AmountKobo
}

// Key makes an idempotency key from the phase's seed, shaped like a UUID.
func (r *Run) Key() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, b := r.rng.Uint64(), r.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, a>>16&0xffff, a&0xfff, b>>48&0x3fff|0x8000, b&0xffffffffffff)
}

// Uint64 draws from the phase's seeded generator.
func (r *Run) Uint64() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Uint64()
}

// Handler returns a correct idempotent handler on the phase's bank, with
// fencing tokens drawn from the phase's seed and lock expiry on clock (the
// real clock when nil).
func (r *Run) Handler(clock *faults.Clock) *idem.Handler {
	h := &idem.Handler{DB: r.DB, Store: &idem.Store{NewLockID: idem.SeededLockIDs(r.Uint64())}}
	if clock != nil {
		h.Now = clock.Now
	}
	r.applyBug(h)
	return h
}

// applyBug switches the phase's bug on in h. Network calls it again, because
// a story may set the handler's flaws after Handler made it.
func (r *Run) applyBug(h *idem.Handler) {
	if r.bug != nil {
		r.bug.Apply(h)
	}
}

// Network returns a fault-injecting network to h, seeded from the phase,
// whose server-side notes join the story. The server is called "server" in
// pictures of the run; NetworkTo names it.
func (r *Run) Network(h *idem.Handler, clock *faults.Clock) *faults.Network {
	return r.NetworkTo("server", h, clock)
}

// NetworkTo is Network to a server with a name of its own ("server A"), for
// stories with several.
func (r *Run) NetworkTo(name string, h *idem.Handler, clock *faults.Clock) *faults.Network {
	r.applyBug(h)
	n := faults.NewNetwork(r.traced(name, h), r.Uint64(), clock)
	n.Env.Note = func(format string, args ...any) { r.ServerAt(name, format, args...) }
	n.Env.Struck = func(s faults.Strike) { r.struck(name, s) }
	for _, f := range r.faults {
		if fault, err := faults.New(f.Name); err == nil {
			n.Override(faults.Rule{Fault: fault, Attempts: f.Attempts})
		}
	}
	r.mu.Lock()
	r.networks = append(r.networks, n)
	r.mu.Unlock()
	return n
}

// struck records a fault where it struck: the network, the server called
// server, or its database.
func (r *Run) struck(server string, s faults.Strike) {
	lane := s.Lane
	if lane == faults.LaneServer {
		lane = server
	}
	r.emit(Event{Kind: KindFault, Text: s.Text, Lane: lane, Fault: s.Fault})
}

// fired counts how often each fault struck in this phase.
func (r *Run) fired() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, n := range r.networks {
		for k, v := range n.Fired() {
			out[k] += v
		}
	}
	for _, p := range r.proxies {
		for k, v := range p.Fired() {
			out[k] += v
		}
	}
	return out
}

type deliveryKey struct{}

// traced is h as the network's far end, telling the pictures of the run
// what reached the server, what the server did in the database and what it
// answered.
func (r *Run) traced(lane string, h *idem.Handler) faults.Server {
	return func(ctx context.Context, req idem.Request) (bank.Response, error) {
		id, _ := ctx.Value(deliveryKey{}).(int)
		r.emit(Event{Kind: KindArrive, From: "network", To: lane, Delivery: id, Text: requestText(req)})
		// The claim is told when it happens: a server may go silent right
		// after it (crash-after-claim) and answer much later, or never.
		hooks := idem.HooksFrom(ctx)
		after := hooks.AfterClaim
		hooks.AfterClaim = func(hctx context.Context, c idem.Claim) {
			what := "claims the key, token " + c.LockID
			if c.TookOver {
				what = "lock expired: takes the key over, token " + c.LockID
			}
			r.emit(Event{Kind: KindDatabase, From: lane, To: r.databaseLane(), Delivery: id, Text: what})
			if after != nil {
				after(hctx, c)
			}
		}
		// A fault that ends the server right after its commit
		// (crash-after-commit) leaves no answer to tell: what it committed
		// is told at the commit, or never.
		told := false
		if crash := hooks.AfterCommit; crash != nil {
			hooks.AfterCommit = func(hctx context.Context) {
				qctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), 5*time.Second)
				ids, moved := r.committed(qctx, bank.IntentFrom(ctx), bank.Response{}, errCommitted)
				cancel()
				if len(ids) > 0 {
					told = true
					r.emit(Event{Kind: KindDatabase, From: lane, To: r.databaseLane(), Delivery: id,
						Text: databaseText(h, bank.Response{}, nil, ids), Moved: moved, Transfers: ids})
				}
				crash(hctx)
			}
		}
		resp, err := h.Handle(idem.WithHooks(ctx, hooks), req)
		r.served(ctx, lane, id, h, bank.IntentFrom(ctx), resp, err, told)
		return resp, err
	}
}

// errCommitted makes committed read a request's transfers from the ledger:
// its answer is not there yet.
var errCommitted = errors.New("committed, not yet answered")

// served tells the pictures what a server did in the database for one
// request and what it answered. The transfers the request committed are
// read from the ledger (by its intent), not guessed from the answer: a
// server that fails after its commit answers 500 for money that moved.
// told says the request's commit was told already (traced).
func (r *Run) served(ctx context.Context, lane string, id int, h *idem.Handler, intent string, resp bank.Response, err error, told bool) {
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ids, moved := r.committed(qctx, intent, resp, err)
	if what := databaseText(h, resp, err, ids); what != "" && !told {
		r.emit(Event{Kind: KindDatabase, From: lane, To: r.databaseLane(), Delivery: id, Text: what, Moved: moved, Transfers: ids})
	}
	answer := "500 internal_error"
	if err == nil {
		answer = resp.Summary()
	}
	e := Event{Kind: KindAnswer, From: lane, To: "network", Delivery: id, Text: answer}
	if r.snapshots {
		if l, err := bank.ReadLedger(qctx, r.DB); err == nil {
			e.Ledger = l.Line()
		}
	}
	r.emit(e)
}

// committed returns the transfers a request committed, and the money they
// moved. A fresh 201 names its transfer. After a failure the answer says
// nothing, so the ledger is asked for the intent's transfers not seen
// before (a failure after a commit is not staged concurrently with another
// copy of its intent, so none of those can be another request's).
func (r *Run) committed(ctx context.Context, intent string, resp bank.Response, err error) ([]int64, int64) {
	if err == nil {
		rc, ok := resp.Receipt()
		if !ok || resp.Replayed {
			return nil, 0
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.seen == nil {
			r.seen = map[int64]bool{}
		}
		r.seen[rc.TransferID] = true
		return []int64{rc.TransferID}, rc.AmountKobo
	}
	if intent == "" {
		return nil, 0
	}
	rows, err := r.DB.Query(ctx, "SELECT id, amount_kobo FROM transfers WHERE intent = $1 ORDER BY id", intent)
	if err != nil {
		return nil, 0
	}
	defer rows.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[int64]bool{}
	}
	var ids []int64
	var moved int64
	for rows.Next() {
		var id, amount int64
		if rows.Scan(&id, &amount) != nil {
			return nil, 0
		}
		if !r.seen[id] {
			r.seen[id] = true
			ids = append(ids, id)
			moved += amount
		}
	}
	return ids, moved
}

func requestText(req idem.Request) string {
	key := "no key"
	if req.Key != "" {
		key = "key " + req.Key
	}
	if t, refusal := bank.ParseTransferRequest(req.Body); refusal == nil {
		return fmt.Sprintf("POST %s, %s", bank.Naira(t.AmountKobo), key)
	}
	return "POST, " + key
}

// databaseText is what a server did in the database for one request: the
// transfers it committed (read from the ledger), and what its answer says
// about the key.
func databaseText(h *idem.Handler, resp bank.Response, err error, committed []int64) string {
	keyed := !h.NoKey && h.Memory == nil
	if len(committed) > 0 {
		t := "transfer " + joinIDs(committed)
		switch {
		case err != nil && keyed && h.SecondTransaction:
			return t + ", COMMIT; storing its answer fails: ROLLBACK of that"
		case err != nil:
			return t + ", COMMIT; then it fails: " + shortError(err)
		case keyed && h.SecondTransaction:
			return t + ", COMMIT; answer, COMMIT"
		case keyed:
			return t + " + its answer, COMMIT"
		}
		return t + ", COMMIT"
	}
	switch {
	case errors.Is(err, idem.ErrLostLock):
		return "fencing check fails: ROLLBACK, transfer too"
	case err != nil:
		return "ROLLBACK: " + shortError(err)
	case resp.Replayed:
		return "key completed: its stored answer"
	case resp.Status == 409:
		return "key in progress, its lock still valid"
	case resp.Code() == idem.CodeKeyReused:
		return "key stored for another request"
	case resp.Code() == idem.CodeKeyRequired:
		return ""
	case resp.OK():
		return "no transfer for this request"
	case keyed:
		return resp.Code() + ", stored for the key"
	}
	return resp.Code()
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

// shortError is an error's last sentence, without the wrapping of the
// layers it crossed.
func shortError(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		msg = msg[i+2:]
	}
	return msg
}

// AdaPaysBola is the lesson's request: ₦10,000 from Ada (account 1) to Bola
// (account 2).
var AdaPaysBola = bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}

// AdaTap is one tap of Ada's Send for the lesson's request (with the amount
// of a live experiment, if any), with the key her app makes for it once,
// from the phase's seed.
func (r *Run) AdaTap(label string) Intent {
	req := AdaPaysBola
	req.AmountKobo = r.Amount()
	return Intent{Label: label, UserID: 1, Key: r.Key(), Request: req}
}

// Intent is one thing a user decided to do: its label (for the ledger), who,
// the key their app made for it, and the request. Body overrides the request's
// JSON when a scenario needs to send it spelled differently or malformed.
// Human, when set, is how the output names it instead of "Ada's ₦10,000 to
// Bola".
type Intent struct {
	Label   string
	UserID  int64
	Key     string
	Request bank.TransferRequest
	Body    []byte
	Human   string
}

func (in Intent) body() []byte {
	if in.Body != nil {
		return in.Body
	}
	return in.Request.Body()
}

// Send makes one attempt of an intent through the network and narrates it.
func (r *Run) Send(ctx context.Context, net *faults.Network, in Intent, attempt int, label string) (bank.Response, error) {
	if label == "" {
		label = fmt.Sprintf("attempt %d", attempt)
	}
	ctx = r.sending(ctx, in, label)
	resp, err := net.Send(ctx, faults.Delivery{
		Attempt: attempt,
		Intent:  in.Label,
		Request: idem.Request{UserID: in.UserID, Key: in.Key, Body: in.body()},
	})
	r.record(ctx, in, label, resp, err)
	return resp, err
}

// SendSetup is Send for a request that only sets the story up (the keys
// that a cleanup job will find, say): recorded and judged like any other,
// shown with --verbose and in pictures of the run, but not in the story.
func (r *Run) SendSetup(ctx context.Context, net *faults.Network, in Intent, attempt int, label string) (bank.Response, error) {
	return r.Send(context.WithValue(ctx, setupKey{}, true), net, in, attempt, label)
}

type setupKey struct{}

// sending tells the pictures that a request leaves its client, and numbers
// it so that its pieces can be joined.
func (r *Run) sending(ctx context.Context, in Intent, label string) context.Context {
	if in.Human != "" {
		r.Label(in.Label, in.Human)
	}
	r.mu.Lock()
	r.deliveries++
	id := r.deliveries
	r.mu.Unlock()
	text := label + ": " + requestText(idem.Request{Key: in.Key, Body: in.body()})
	r.emit(Event{Kind: KindSend, From: userName(in.UserID), To: "network", Delivery: id, Text: text})
	return context.WithValue(ctx, deliveryKey{}, id)
}

func (r *Run) record(ctx context.Context, in Intent, label string, resp bank.Response, err error) {
	id, _ := ctx.Value(deliveryKey{}).(int)
	told := bank.Told{Intent: in.Label, UserID: in.UserID, Request: in.Request}
	setup, _ := ctx.Value(setupKey{}).(bool)
	e := Event{Kind: KindAttempt, From: "network", To: userName(in.UserID), Delivery: id, Setup: setup}
	if err == nil {
		told.Response = resp
		e.Text = label + ": " + Describe(resp)
	} else {
		e.Text = label + ": " + err.Error()
	}
	r.emit(e)
	r.Told(told)
}

// SendWithRetries is the lesson's client: the same key on every attempt,
// retrying only what may succeed later (no answer, 409, 429, 5xx).
func (r *Run) SendWithRetries(ctx context.Context, net *faults.Network, in Intent, attempts int) (bank.Response, error) {
	var resp bank.Response
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if attempt > 1 && r.bug != nil && (r.bug.NewKeyPerAttempt || r.bug.NewKeyAfterServerError && resp.Status >= 500) {
			in.Key = r.Key()
		}
		resp, err = r.Send(ctx, net, in, attempt, "")
		if err == nil && resp.Final() {
			return resp, nil
		}
		if err != nil && !errors.Is(err, faults.ErrNoResponse) {
			return resp, err
		}
	}
	return resp, err
}

// Describe is how the story prints a response: "201 replayed: transfer 1,
// ₦10,000 from Ada to Bola" or "422 insufficient_funds".
func Describe(resp bank.Response) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", resp.Status)
	if resp.Replayed {
		b.WriteString(" replayed")
	}
	if rc, ok := resp.Receipt(); ok {
		fmt.Fprintf(&b, ": transfer %d, %s from %s to %s", rc.TransferID, bank.Naira(rc.AmountKobo), holder(rc.From), holder(rc.To))
		return b.String()
	}
	if c := resp.Code(); c != "" {
		b.WriteString(" " + c)
	}
	return b.String()
}

func holder(id int64) string {
	for _, a := range bank.LessonAccounts {
		if a.ID == id {
			return a.FirstName()
		}
	}
	return fmt.Sprintf("account %d", id)
}

// userName is a user's first name, which is also their lane in pictures.
func userName(user int64) string {
	for _, a := range bank.LessonAccounts {
		if a.OwnerID == user {
			return a.FirstName()
		}
	}
	if user == 0 {
		return "client"
	}
	return fmt.Sprintf("user %d", user)
}

// plural spells a count with its noun: "1 transfer", "2 transfers".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Dur spells a duration for people, rounded: "62 ms", "1 s", "31 s",
// "24 h", "1 h 30 min". Stories use it instead of Go's "24h0m0s".
func Dur(d time.Duration) string {
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	switch {
	case d == 0:
		return "0 s"
	case d < time.Millisecond:
		return neg + "<1 ms"
	case d < time.Second:
		return fmt.Sprintf("%s%d ms", neg, d.Round(time.Millisecond)/time.Millisecond)
	case d < 10*time.Second && d%time.Second != 0:
		return fmt.Sprintf("%s%.1f s", neg, d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%s%d s", neg, d.Round(time.Second)/time.Second)
	case d < time.Hour:
		m, s := d.Round(time.Second)/time.Minute, d.Round(time.Second)%time.Minute/time.Second
		if s == 0 {
			return fmt.Sprintf("%s%d min", neg, m)
		}
		return fmt.Sprintf("%s%d min %d s", neg, m, s)
	}
	h, m := d.Round(time.Minute)/time.Hour, d.Round(time.Minute)%time.Hour/time.Minute
	if m == 0 {
		return fmt.Sprintf("%s%d h", neg, h)
	}
	return fmt.Sprintf("%s%d h %d min", neg, h, m)
}
