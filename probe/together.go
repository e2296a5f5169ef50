package probe

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// volley is what together observed of requests sent at the same instant.
type volley struct {
	attempts []*Attempt
	// spread is how far apart the requests were completed at the server
	// (their last bytes); beforeAnswer reports whether every request was
	// complete before the first answer arrived, which is what makes them
	// overlap rather than queue.
	spread       time.Duration
	beforeAnswer bool
}

// together sends one attempt of each intent (ins may repeat an intent: its
// copies) at the same instant. Each request is written up to its last byte
// on its own connection first; then a barrier releases them all and every
// last byte goes out at once, so the server receives them complete within
// microseconds of each other. Copies are spread over the target's URLs.
func (c *checkRun) together(ctx context.Context, ins []*intent) volley {
	n := len(ins)
	attempts := make([]*Attempt, n)
	helds := make([]*held, n)
	errs := make([]error, n)
	starts := make([]time.Time, n)
	for i, in := range ins {
		o := sendOpts{copy: i % len(c.eps)}
		req := c.request(in, o)
		attempts[i] = c.newAttempt(in, o, req.Body)
		starts[i] = time.Now()
		helds[i], errs[i] = hold(ctx, req, c.cfg.Timeout)
	}
	gate := make(chan struct{})
	answered := make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range ins {
		if errs[i] != nil {
			c.finish(attempts[i], nil, errs[i], starts[i])
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			err := helds[i].fire()
			if err != nil {
				helds[i].close()
			}
			c.finish(attempts[i], helds[i], err, starts[i])
			answered[i] = time.Now()
		}()
	}
	close(gate)
	wg.Wait()

	v := volley{attempts: attempts, beforeAnswer: true}
	var first, last time.Time
	var firstAnswer time.Time
	for i, h := range helds {
		if h == nil || h.Fired.IsZero() {
			continue
		}
		if first.IsZero() || h.Fired.Before(first) {
			first = h.Fired
		}
		if h.Fired.After(last) {
			last = h.Fired
		}
		if attempts[i].Answer != nil && (firstAnswer.IsZero() || answered[i].Before(firstAnswer)) {
			firstAnswer = answered[i]
		}
	}
	v.spread = last.Sub(first)
	v.beforeAnswer = firstAnswer.IsZero() || !firstAnswer.Before(last)
	return v
}

// describe is the volley's overlap as evidence.
func (v volley) describe() string {
	s := fmt.Sprintf("the %d requests were completed at the server within %s of each other", len(v.attempts), v.spread.Round(time.Microsecond))
	if v.beforeAnswer {
		return s + ", all before the first answer came back"
	}
	return s + ", but an answer came back before the last was sent: they may not have overlapped"
}

// statuses counts a volley's answers: "1 × 201, 1 × 409".
func statuses(as []*Attempt) string {
	counts := map[string]int{}
	var order []string
	for _, a := range as {
		k := "no answer"
		if a.Answer != nil {
			k = fmt.Sprint(a.Answer.Status)
			if a.Answer.Code != "" {
				k += " " + a.Answer.Code
			}
		}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	s := ""
	for i, k := range order {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d × %s", counts[k], k)
	}
	return s
}

// same judges a later answer to in against the transfer first: it must
// name the same transfer. Another transfer is taken into the money model
// (it happened) and fails the check.
func (c *checkRun) same(in *intent, a *Answer, first *Answer, what string) bool {
	switch {
	case a == nil:
		return false // settled has said why
	case a.Receipt() && a.TransferID == first.TransferID:
		c.okf("%s: the same transfer %s%s", what, a.TransferID, map[bool]string{true: ", marked as a replay", false: ""}[a.Replayed])
		c.sameBytes(a, first, what)
		return true
	case a.Receipt():
		c.debit(receipt{in, a})
		c.acknowledged(in)
		c.failf("%s made another transfer, %s, after %s: the money moved twice for one intent", what, a.TransferID, first.TransferID)
	default:
		c.failf("%s was answered %s instead of the first answer (transfer %s): the client is told the wrong outcome", what, a, first.TransferID)
	}
	return false
}

// first sends in and settles it, and requires a transfer: the opening move
// of most stories. It returns nil (the check has failed) otherwise.
func (c *checkRun) first(ctx context.Context, in *intent, o sendOpts) *Answer {
	sent := c.send(ctx, in, o)
	c.saw(sent)
	a := c.settled(ctx, in, o.copy)
	if a == nil {
		return nil
	}
	if sent.Answer == a && a.Receipt() && !a.Replayed {
		// A fresh transfer answered at once: how long the server's work
		// takes, for aiming the hang-ups.
		c.noteLatency(sent.waited)
	}
	if !a.Receipt() {
		c.failf("%s, a plain transfer that the preflight showed the target makes, was answered %s", in.Label, a)
		return nil
	}
	c.debit(receipt{in, a})
	c.acknowledged(in)
	return a
}

// witness makes one more plain transfer when the balances in answers are
// the only money evidence: its reported balance must follow from the known
// one, so a refused request that moved money anyway shows here, in the
// check that sent it, not in a later one.
func (c *checkRun) witness(ctx context.Context) {
	if c.cfg.Balances != nil || !c.caps.Balance {
		return
	}
	if _, ok := c.knownBalance(c.cfg.Payer.Account); !ok {
		return
	}
	in := c.intent("witness", c.cfg.Payer, c.pay(c.amount()))
	fails := len(c.fails)
	if a := c.first(ctx, in, sendOpts{}); a != nil && len(c.fails) == fails {
		c.okf("a witness transfer reports the balance the acknowledged transfers predict: nothing else moved")
	}
}

// answers lists attempts' answers in order: "409, 201 transferId 7".
func answers(as []*Attempt) string {
	var out []string
	for _, a := range as {
		switch {
		case a.Answer == nil:
			out = append(out, "no answer")
		case a.Answer.Receipt():
			out = append(out, a.Answer.String())
		default:
			s := fmt.Sprint(a.Answer.Status)
			if a.Answer.Code != "" {
				s += " " + a.Answer.Code
			}
			out = append(out, s)
		}
	}
	return strings.Join(out, ", then ")
}
