package scenarios

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
)

// World is a phase's systems beyond the database: the SMS provider and the
// message log (in process, seeded from the phase), and the means to build
// the parts that talk to them with the phase's bug switched on. A control
// adds its own deliberate mistakes with With before building anything.
type World struct {
	r     *Run
	SMS   *outbox.Provider
	Log   *outbox.Log
	Flaws outbox.Flaws

	mu     sync.Mutex
	tokens *rand.Rand
}

// World returns the phase's systems beyond the database.
func (r *Run) World() *World {
	w := &World{r: r, SMS: outbox.NewProvider(r.Uint64()), Log: outbox.NewLog(3),
		tokens: rand.New(rand.NewPCG(r.Uint64(), 0x746f6b))}
	if r.bug != nil {
		w.Flaws = r.bug.Outbox
	}
	return w
}

// With switches on mistakes of a control, on top of the phase's bug.
func (w *World) With(f outbox.Flaws) *World {
	w.Flaws = w.Flaws.Or(f)
	return w
}

// Token draws a claim or lock token from the phase's seed.
func (w *World) Token(prefix string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%s-%08x", prefix, w.tokens.Uint32())
}

// Handler is Run.Handler whose transfers also send an SMS (sms) and publish
// an event (events), as the world's flaws say.
func (w *World) Handler(clock *faults.Clock, sms, events bool) *idem.Handler {
	h := w.r.Handler(clock)
	e := &outbox.Effects{DB: w.r.DB, Flaws: w.Flaws, Note: w.r.Server}
	if sms {
		e.SMS = w.SMS
	}
	if events {
		e.Log = w.Log
	}
	h.Effects = e
	return h
}

// laneDispatchers is the lane of the outbox's dispatchers in pictures of a
// run: they work beside the servers, on the same database.
const laneDispatchers = "dispatchers"

// Dispatcher returns a dispatcher called name on the phase's outbox, with
// seeded claim tokens, telling the story of each row.
func (w *World) Dispatcher(name string) *outbox.Dispatcher {
	return &outbox.Dispatcher{DB: w.r.DB, Name: name, SMS: w.SMS, Log: w.Log, Flaws: w.Flaws,
		NewToken: func() string { return w.Token("claim") },
		Note:     func(format string, args ...any) { w.r.ServerAt(laneDispatchers, format, args...) }}
}

// Consumer returns a consumer of the transfers topic in group name.
func (w *World) Consumer(name string) *outbox.Consumer {
	return &outbox.Consumer{DB: w.r.DB, Name: name, Flaws: w.Flaws,
		Note: func(format string, args ...any) { w.r.ServerAt(name, format, args...) }}
}

// Check adds the side effects' invariants, as world selects them, to the
// phase's.
func (w *World) Check(ctx context.Context, world outbox.World) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	checks, err := outbox.Check(cctx, w.r.DB, world)
	if err != nil {
		w.r.Expect(false, "to read the side effects (%v)", err)
		return
	}
	for _, c := range checks {
		w.r.Invariant(c.Name, c.OK, c.Detail)
	}
}

// Phone tells the story what the user's phone shows, from the provider's
// record, and returns those messages.
func (w *World) Phone(user int64) []outbox.SMS {
	msgs := w.SMS.MessagesTo(user)
	w.r.Step("%s's phone: %s", userName(user), describeSMS(msgs))
	return msgs
}

// describeSMS is how the story prints messages: each text with its
// transfer, a repeat counted ("twice").
func describeSMS(msgs []outbox.SMS) string {
	if len(msgs) == 0 {
		return "no SMS"
	}
	var parts []string
	for i := 0; i < len(msgs); {
		j := i + 1
		for j < len(msgs) && msgs[j].Text == msgs[i].Text && msgs[j].TransferID == msgs[i].TransferID {
			j++
		}
		parts = append(parts, fmt.Sprintf("%q (transfer %d)%s", msgs[i].Text, msgs[i].TransferID, times(j-i)))
		i = j
	}
	return strings.Join(parts, ", ")
}

// times says how often something happened, when more than once.
func times(n int) string {
	switch n {
	case 1:
		return ""
	case 2:
		return " twice"
	}
	return fmt.Sprintf(" %d times", n)
}

// waitFor waits for ch to close or deliver, at most d, and says what it was
// waiting for if it did not come.
func waitFor[T any](ctx context.Context, ch <-chan T, d time.Duration, what string) (T, error) {
	var zero T
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return zero, fmt.Errorf("waited %s for %s", d, what)
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// crashAfterSend runs one batch of d and makes d die the moment its first
// send has been accepted, before it marks the row done: a process that dies
// runs nothing more. It returns once d is dead.
func crashAfterSend(ctx context.Context, d *outbox.Dispatcher) error {
	died := make(chan struct{})
	finished := make(chan error, 1)
	d.Hooks.AfterSend = func(context.Context, outbox.Row) {
		close(died)
		runtime.Goexit()
	}
	go func() {
		_, err := d.RunOnce(ctx)
		finished <- err
	}()
	select {
	case <-died:
		return nil
	case err := <-finished:
		return fmt.Errorf("dispatcher %s finished without sending anything (%v)", d.Name, err)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("waited 10s for dispatcher %s to send", d.Name)
	}
}
