package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/banksim/bank-sim/outbox"
)

// The provider honours its idempotency key: one SMS per key however often
// and however concurrently it is sent, a new SMS for every send without one.
func TestProviderIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := outbox.NewProvider(1)
	m := outbox.Message{Key: "outbox-7", UserID: 1, Text: "You sent ₦10,000 to Bola", TransferID: 3}

	var wg sync.WaitGroup
	results := make([]outbox.Accepted, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Send(ctx, m)
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	if got := len(p.Messages()); got != 1 {
		t.Fatalf("16 sends with one key: %d SMS, want 1", got)
	}
	fresh := 0
	for _, r := range results {
		if r.SMSID != 1 {
			t.Errorf("answer %+v, want SMS 1", r)
		}
		if !r.Replayed {
			fresh++
		}
	}
	if fresh != 1 || len(p.Calls()) != 16 {
		t.Errorf("%d fresh answers and %d calls, want 1 and 16", fresh, len(p.Calls()))
	}

	m.Key = ""
	for range 2 {
		if _, err := p.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(p.Messages()); got != 3 {
		t.Errorf("two sends without a key after one with: %d SMS, want 3", got)
	}
}

// Down, the provider sends nothing; a lost answer is a message sent whose
// sender hears a timeout, and whose resend with the same key is a replay.
func TestProviderDownAndLostAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := outbox.NewProvider(1)
	m := outbox.Message{Key: "outbox-1", UserID: 2, Text: "hello", TransferID: 1}

	p.SetDown(true)
	if _, err := p.Send(ctx, m); !errors.Is(err, outbox.ErrProviderDown) {
		t.Fatalf("down: %v, want ErrProviderDown", err)
	}
	if len(p.Messages()) != 0 {
		t.Fatal("a provider that is down sent an SMS")
	}
	p.SetDown(false)

	p.LoseNextAnswers(1)
	if _, err := p.Send(ctx, m); !errors.Is(err, outbox.ErrProviderTimeout) {
		t.Fatalf("lost answer: %v, want ErrProviderTimeout", err)
	}
	if len(p.MessagesTo(2)) != 1 {
		t.Fatalf("a lost answer must still send the SMS: %d sent", len(p.MessagesTo(2)))
	}
	r, err := p.Send(ctx, m)
	if err != nil || !r.Replayed || r.SMSID != 1 {
		t.Fatalf("resend after a lost answer: %+v %v, want a replay of SMS 1", r, err)
	}
	if len(p.Messages()) != 1 {
		t.Errorf("%d SMS after a lost answer and its resend, want 1", len(p.Messages()))
	}
	outcomes := []string{}
	for _, c := range p.Calls() {
		outcomes = append(outcomes, c.Outcome)
	}
	if want := []string{"down", "lost answer", "replayed"}; !equal(outcomes, want) {
		t.Errorf("calls %q, want %q", outcomes, want)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
