package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
)

// ErrProviderDown is the provider refusing a message: nothing was accepted,
// and sending it again later is safe.
var ErrProviderDown = errors.New("SMS provider unavailable: nothing was sent")

// ErrProviderTimeout is the sender giving up on the provider's answer. The
// provider may have accepted the message: the sender cannot know, which is
// why it retries with the same idempotency key.
var ErrProviderTimeout = errors.New("SMS provider timed out: the message may or may not have been sent")

// Message is one SMS as a sender asks for it.
type Message struct {
	// Key is the provider's idempotency key: a message with a key the
	// provider has accepted before is not sent again. "" sends without one.
	Key string `json:"key,omitempty"`
	// UserID is whose phone it goes to.
	UserID int64  `json:"userId"`
	Text   string `json:"text"`
	// TransferID is the simulator's oracle, like transfers.intent: which
	// transfer the message is about, so that the checker can count SMS per
	// transfer from the provider's own record. A real SMS carries only text.
	TransferID int64 `json:"transferId"`
}

// SMS is a message the provider accepted: what reached a phone.
type SMS struct {
	ID int64 `json:"id"`
	Message
}

// Call is one request the provider received, and what became of it.
type Call struct {
	Message
	// Outcome is "accepted", "replayed" (a key it had accepted already: the
	// first message's id is answered, nothing is sent), "down" (refused,
	// nothing sent), "lost answer" (accepted and sent; the sender was not
	// told) or "replayed, lost answer" (a replay whose answer was lost:
	// nothing new sent, and the sender was not told).
	Outcome string `json:"outcome"`
	SMSID   int64  `json:"smsId,omitempty"`
}

// Accepted is the provider's answer to a message it accepted.
type Accepted struct {
	SMSID int64
	// Replayed is set when the key had been accepted before: no new SMS.
	Replayed bool
}

// Provider is the SMS provider, in process: it keeps its own record of every
// message it accepted and every call it received, honours a per-message
// idempotency key, can be down, and can accept a message and then lose its
// answer, so that the sender does not know.
type Provider struct {
	mu        sync.Mutex
	sms       []SMS
	calls     []Call
	byKey     map[string]int64
	down      bool
	loseNext  int
	loseRate  float64
	rng       *rand.Rand
	loseIf    func(m Message, replay bool) bool
	onAccept  func(SMS)
	beforeAny func(ctx context.Context, m Message)
}

// NewProvider returns a provider that is up, with an empty record. seed
// drives its random answer losses (SetLoseRate).
func NewProvider(seed uint64) *Provider {
	return &Provider{byKey: map[string]int64{}, rng: rand.New(rand.NewPCG(seed, 0x736d73))}
}

// SetDown makes the provider refuse every message (true) or accept them
// again (false).
func (p *Provider) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// LoseNextAnswers makes the provider accept the next n new messages and
// lose its answer to each: they reach the phone, the sender hears a timeout.
func (p *Provider) LoseNextAnswers(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseNext = n
}

// SetLoseRate makes the provider lose its answer to each accepted message
// with probability rate, drawn from its seed.
func (p *Provider) SetLoseRate(rate float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseRate = rate
}

// LoseIf makes the provider lose its answer to each message it accepts for
// which f says so (nil: none): a chaos run decides from its seed and the
// message, not from the order the messages arrive in. f is asked about a
// replay too (replay set: a key the provider has accepted before, so
// nothing new is sent), as a real provider's answer to a re-send can time
// out like any other.
func (p *Provider) LoseIf(f func(m Message, replay bool) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseIf = f
}

// OnAccept is told about every new SMS (serve logs them).
func (p *Provider) OnAccept(f func(SMS)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onAccept = f
}

// BeforeEach runs f before every call is handled, outside the provider's
// lock: a scenario stages a slow provider with it.
func (p *Provider) BeforeEach(f func(ctx context.Context, m Message)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeAny = f
}

// Send asks the provider to send m.
func (p *Provider) Send(ctx context.Context, m Message) (Accepted, error) {
	p.mu.Lock()
	before := p.beforeAny
	p.mu.Unlock()
	if before != nil {
		before(ctx, m)
	}
	if err := ctx.Err(); err != nil {
		return Accepted{}, err
	}
	p.mu.Lock()
	if p.down {
		p.calls = append(p.calls, Call{Message: m, Outcome: "down"})
		p.mu.Unlock()
		return Accepted{}, ErrProviderDown
	}
	if id, seen := p.byKey[m.Key]; seen && m.Key != "" {
		if p.loseIf != nil && p.loseIf(m, true) {
			p.calls = append(p.calls, Call{Message: m, Outcome: "replayed, lost answer", SMSID: id})
			p.mu.Unlock()
			return Accepted{}, ErrProviderTimeout
		}
		p.calls = append(p.calls, Call{Message: m, Outcome: "replayed", SMSID: id})
		p.mu.Unlock()
		return Accepted{SMSID: id, Replayed: true}, nil
	}
	s := SMS{ID: int64(len(p.sms) + 1), Message: m}
	p.sms = append(p.sms, s)
	if m.Key != "" {
		p.byKey[m.Key] = s.ID
	}
	lose := p.loseNext > 0 || (p.loseRate > 0 && p.rng.Float64() < p.loseRate) || (p.loseIf != nil && p.loseIf(m, false))
	if p.loseNext > 0 {
		p.loseNext--
	}
	outcome := "accepted"
	if lose {
		outcome = "lost answer"
	}
	p.calls = append(p.calls, Call{Message: m, Outcome: outcome, SMSID: s.ID})
	notify := p.onAccept
	p.mu.Unlock()
	if notify != nil {
		notify(s)
	}
	if lose {
		return Accepted{}, ErrProviderTimeout
	}
	return Accepted{SMSID: s.ID}, nil
}

// Messages returns every SMS the provider accepted, in order.
func (p *Provider) Messages() []SMS {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]SMS(nil), p.sms...)
}

// MessagesTo returns the SMS sent to user's phone, in order.
func (p *Provider) MessagesTo(user int64) []SMS {
	var out []SMS
	for _, s := range p.Messages() {
		if s.UserID == user {
			out = append(out, s)
		}
	}
	return out
}

// Calls returns every request the provider received, in order.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Call(nil), p.calls...)
}
