package cmd

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults"
)

// A pause counts as held from its start to the key that ends it, and only
// then: what the story's clock leaves out (scenarios.Options.Held). On a
// fake clock, so that "held stops growing" is shown by moving the clock an
// hour on, not by waiting to see.
func TestPacerCountsItsPausesAsHeld(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make(chan byte)
	clock := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
	pc := &pacer{ctx: ctx, quit: cancel, keys: keys, prompt: io.Discard, p: newPalette(false), now: clock.Now}
	if h := pc.held(); h != 0 {
		t.Fatalf("held %s before any pause", h)
	}
	done := make(chan struct{})
	go func() { pc.pause(); close(done) }()
	// The pause has begun once a tick of the clock counts as held.
	deadline := time.Now().Add(time.Minute)
	for pc.held() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a minute into a pause, nothing counts as held")
		}
		clock.Advance(time.Second)
		time.Sleep(time.Millisecond)
	}
	during := pc.held()
	clock.Advance(7 * time.Second)
	if h := pc.held(); h != during+7*time.Second {
		t.Fatalf("held %s, then %s 7 s later in a pause: want it to grow by the 7 s", during, h)
	}
	keys <- '\n'
	<-done
	after := pc.held()
	if after != during+7*time.Second {
		t.Fatalf("held %s once the pause ended, want the %s it had counted", after, during+7*time.Second)
	}
	// The pause has ended: held stops growing.
	clock.Advance(time.Hour)
	if h := pc.held(); h != after {
		t.Errorf("held goes on growing after the pause ended: %s, then %s an hour later", after, h)
	}
	var none *pacer
	if none.held() != 0 {
		t.Errorf("no pacer, yet something held")
	}
}
