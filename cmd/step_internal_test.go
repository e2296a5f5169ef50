package cmd

import (
	"context"
	"io"
	"testing"
	"time"
)

// A pause counts as held from its start to the key that ends it, and only
// then: what the story's clock leaves out (scenarios.Options.Held).
func TestPacerCountsItsPausesAsHeld(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make(chan byte)
	pc := &pacer{ctx: ctx, quit: cancel, keys: keys, prompt: io.Discard, p: newPalette(false)}
	if h := pc.held(); h != 0 {
		t.Fatalf("held %s before any pause", h)
	}
	done := make(chan struct{})
	go func() { pc.pause(); close(done) }()
	// The pause has begun once it counts as held.
	deadline := time.Now().Add(time.Minute)
	for pc.held() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a minute into a pause, nothing counts as held")
		}
		time.Sleep(time.Millisecond)
	}
	keys <- '\n'
	<-done
	after := pc.held()
	if after <= 0 {
		t.Fatalf("held %s after a pause", after)
	}
	// The pause has ended: held stops growing.
	time.Sleep(20 * time.Millisecond)
	if h := pc.held(); h != after {
		t.Errorf("held goes on growing after the pause ended: %s, then %s", after, h)
	}
	var none *pacer
	if none.held() != 0 {
		t.Errorf("no pacer, yet something held")
	}
}
