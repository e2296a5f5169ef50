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
	bug          *idem.Bug       // switched on in every handler and client of the phase
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
	if r.clock != nil {
		e.Clock = "+" + r.clock.Now().Sub(r.clockStart).String()
	}
	r.events = append(r.events, e)
	r.mu.Unlock()
	r.obs.Event(e)
}

// Step narrates.
func (r *Run) Step(format string, args ...any) {
	r.emit(Event{Kind: "step", Text: fmt.Sprintf(format, args...)})
}

// Server narrates what happened where the client cannot see.
func (r *Run) Server(format string, args ...any) {
	r.emit(Event{Kind: "server", Text: fmt.Sprintf(format, args...)})
}

// Expect records one of the lesson's outcomes and whether it happened.
func (r *Run) Expect(ok bool, format string, args ...any) bool {
	text := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.expectations = append(r.expectations, Expectation{Text: text, OK: ok})
	r.mu.Unlock()
	r.emit(Event{Kind: "expect", Text: text, OK: &ok})
	return ok
}

// ExpectBalances checks the balances of Ada, Bola and Chidi, in kobo.
func (r *Run) ExpectBalances(ctx context.Context, ada, bola, chidi int64) {
	l, err := bank.ReadLedger(ctx, r.DB)
	if err != nil {
		r.Expect(false, "to read the balances (%v)", err)
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
	r.Expect(got == want, "%s", text)
}

// ExpectTransfers checks how many transfers the ledger holds.
func (r *Run) ExpectTransfers(ctx context.Context, n int) {
	var got int
	err := r.DB.QueryRow(ctx, "SELECT count(*) FROM transfers").Scan(&got)
	text := plural(n, "transfer", "transfers") + " in the ledger"
	if err != nil || got != n {
		text += fmt.Sprintf(" (found %d)", got)
	}
	r.Expect(err == nil && got == n, "%s", text)
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
// invariant.
func (r *Run) Told(t bank.Told) {
	r.mu.Lock()
	r.told = append(r.told, t)
	r.mu.Unlock()
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
// whose server-side notes join the story.
func (r *Run) Network(h *idem.Handler, clock *faults.Clock) *faults.Network {
	r.applyBug(h)
	n := faults.NewNetwork(h.Handle, r.Uint64(), clock)
	n.Env.Note = r.Server
	return n
}

// AdaPaysBola is the lesson's request: ₦10,000 from Ada (account 1) to Bola
// (account 2).
var AdaPaysBola = bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}

// AdaTap is one tap of Ada's Send for the lesson's request, with the key her
// app makes for it once, from the phase's seed.
func (r *Run) AdaTap(label string) Intent {
	return Intent{Label: label, UserID: 1, Key: r.Key(), Request: AdaPaysBola}
}

// Intent is one thing a user decided to do: its label (for the ledger), who,
// the key their app made for it, and the request. Body overrides the request's
// JSON when a scenario needs to send it spelled differently or malformed.
type Intent struct {
	Label   string
	UserID  int64
	Key     string
	Request bank.TransferRequest
	Body    []byte
}

func (in Intent) body() []byte {
	if in.Body != nil {
		return in.Body
	}
	return in.Request.Body()
}

// Send makes one attempt of an intent through the network and narrates it.
func (r *Run) Send(ctx context.Context, net *faults.Network, in Intent, attempt int, label string) (bank.Response, error) {
	resp, err := net.Send(ctx, faults.Delivery{
		Attempt: attempt,
		Intent:  in.Label,
		Request: idem.Request{UserID: in.UserID, Key: in.Key, Body: in.body()},
	})
	if label == "" {
		label = fmt.Sprintf("attempt %d", attempt)
	}
	r.record(in, label, resp, err)
	return resp, err
}

func (r *Run) record(in Intent, label string, resp bank.Response, err error) {
	told := bank.Told{Intent: in.Label, UserID: in.UserID, Request: in.Request}
	if err == nil {
		told.Response = resp
		r.emit(Event{Kind: "attempt", Text: label + ": " + Describe(resp)})
	} else {
		r.emit(Event{Kind: "attempt", Text: label + ": " + err.Error()})
	}
	r.Told(told)
}

// SendWithRetries is the lesson's client: the same key on every attempt,
// retrying only what may succeed later (no answer, 409, 429, 5xx).
func (r *Run) SendWithRetries(ctx context.Context, net *faults.Network, in Intent, attempts int) (bank.Response, error) {
	var resp bank.Response
	var err error
	for attempt := 1; attempt <= attempts; attempt++ {
		if attempt > 1 && r.bug != nil && r.bug.NewKeyPerAttempt {
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

// plural spells a count with its noun: "1 transfer", "2 transfers".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
