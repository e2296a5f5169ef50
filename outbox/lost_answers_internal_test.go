package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// A chaos run's provider loses the answer to a replay too, and at most
// maxLostAnswers times per SMS in all: at a provider-timeout rate of 1, an
// SMS's first send and its first replay time out, and every later replay
// is answered. A correct dispatcher gives a row up only after
// DefaultMaxAttempts failed sends, so that it never gives one up in a chaos
// run. Catches a bound that is missing (every replay of the row times out,
// the correct dispatcher gives it up) or counts only replays.
func TestChaosProviderLosesAtMostTwoAnswersPerSMS(t *testing.T) {
	t.Parallel()
	if maxLostAnswers >= DefaultMaxAttempts {
		t.Fatalf("maxLostAnswers is %d: a correct dispatcher gives a row up after %d failed sends", maxLostAnswers, DefaultMaxAttempts)
	}
	ctx := context.Background()
	sms := NewProvider(1)
	p := NewPipeline(nil, sms, nil, PipelineConfig{Seed: 42, Rates: map[string]float64{FaultProviderTimeout: 1}})
	sms.LoseIf(p.losesAnswer)
	m := Message{Key: ProviderKey(7), UserID: 1, Text: "You sent ₦10,000 to Bola", TransferID: 3}
	var lost int
	for send := range 2 * DefaultMaxAttempts {
		a, err := sms.Send(ctx, m)
		switch {
		case errors.Is(err, ErrProviderTimeout):
			lost++
			if send >= maxLostAnswers {
				t.Errorf("send %d of one SMS timed out: %d answers lost, want at most %d", send+1, lost, maxLostAnswers)
			}
		case err != nil:
			t.Fatal(err)
		case !a.Replayed || a.SMSID != 1:
			t.Errorf("send %d: answer %+v, want a replay of SMS 1", send+1, a)
		}
	}
	if lost != maxLostAnswers {
		t.Errorf("%d answers lost at rate 1, want %d (the first send's and a replay's)", lost, maxLostAnswers)
	}
	if n := len(sms.Messages()); n != 1 {
		t.Errorf("%d SMS, want 1: a replay whose answer is lost sends nothing", n)
	}
	var outcomes []string
	for _, c := range sms.Calls()[:3] {
		outcomes = append(outcomes, c.Outcome)
	}
	if want := fmt.Sprint([]string{"lost answer", "replayed, lost answer", "replayed"}); fmt.Sprint(outcomes) != want {
		t.Errorf("the provider's first calls: %v, want %s", outcomes, want)
	}
}

// A replay's lost answer is drawn apart from its first send's: the FNV-1a
// hash that decides every fault barely moves its top bits with the try's
// number, so that unmixed, the replay of an SMS whose answer was lost would
// lose its answer too (and the replay of one answered, never). At a rate of
// one half, the two decisions of an SMS agree about half the time. Catches
// a replay's draw taken without the splitmix64 finalizer.
func TestReplayLostAnswerDrawnApartFromTheFirstSend(t *testing.T) {
	t.Parallel()
	p := NewPipeline(nil, NewProvider(1), nil, PipelineConfig{Seed: 42, Rates: map[string]float64{FaultProviderTimeout: 0.5}})
	const keys = 2000
	agree := 0
	for id := range int64(keys) {
		m := Message{Key: ProviderKey(id)}
		if p.losesAnswer(m, false) == p.losesAnswer(m, true) {
			agree++
		}
	}
	if agree < keys*4/10 || agree > keys*6/10 {
		t.Errorf("a first send's and its replay's lost answers agree for %d SMS of %d, want about half", agree, keys)
	}
}
