package idem_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/banksim/bank-sim/idem"
)

func BenchmarkFingerprint(b *testing.B) {
	raw := []byte(`{"to": 2, "from": 1, "amountKobo": 1000000, "note": "rent for September <flat 3>"}`)
	want := idem.Fingerprint(idem.Method, idem.Path, raw)
	b.ReportAllocs()
	for b.Loop() {
		if idem.Fingerprint(idem.Method, idem.Path, raw) != want {
			b.Fatal("fingerprint changed between calls")
		}
	}
}

// BenchmarkCanonical rewrites a body spelled with spaces, keys out of
// order and a number in exponent form: the work behind every fingerprint.
func BenchmarkCanonical(b *testing.B) {
	raw := []byte(`{"to": 2, "from": 1, "amountKobo": 1e6, "note": "rent for September <flat 3>"}`)
	const want = `{"amountKobo":1000000,"from":1,"note":"rent for September <flat 3>","to":2}`
	b.ReportAllocs()
	for b.Loop() {
		got, err := idem.Canonical(raw)
		if err != nil || string(got) != want {
			b.Fatalf("Canonical = %s, %v; want %s", got, err, want)
		}
	}
}

// BenchmarkValidKey checks a good key and a bad one (too short) per op.
func BenchmarkValidKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if !idem.ValidKey("tap-2026-09-24-0001") || idem.ValidKey("tap-0001") {
			b.Fatal("ValidKey changed its mind")
		}
	}
}

// BenchmarkHandleNewKey is a fresh key per op: claim, transfer and stored
// response, pipelined (the correct handler) and one statement at a time.
// Ada and Bola pay each other ₦1 in turn, so nobody runs out.
func BenchmarkHandleNewKey(b *testing.B) {
	b.Run("pipelined", func(b *testing.B) { benchmarkHandleNewKey(b, false) })
	b.Run("unpipelined", func(b *testing.B) { benchmarkHandleNewKey(b, true) })
}

func benchmarkHandleNewKey(b *testing.B, unpipelined bool) {
	pool := newBank(b, 8)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}, Unpipelined: unpipelined}
	ada, bola := body(1, 2, 100), body(2, 1, 100)
	var seq, bad atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			req := idem.Request{UserID: 1, Key: fmt.Sprintf("bench-new-key-%012d", i), Body: ada}
			if i%2 == 0 {
				req = idem.Request{UserID: 2, Key: req.Key, Body: bola}
			}
			resp, err := h.Handle(context.Background(), req)
			if err != nil || resp.Status != 201 || resp.Replayed {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d requests were not a fresh 201", n, seq.Load())
	}
	if n := transfers(b, pool); int64(n) != seq.Load() {
		b.Fatalf("%d transfers for %d new keys", n, seq.Load())
	}
}

// BenchmarkHandleReplay is a retry of a completed key per op.
func BenchmarkHandleReplay(b *testing.B) {
	pool := newBank(b, 8)
	h := &idem.Handler{DB: pool, Store: &idem.Store{}}
	req := idem.Request{UserID: 1, Key: key, Body: body(1, 2, 1_000_000)}
	if resp, err := h.Handle(context.Background(), req); err != nil || resp.Status != 201 {
		b.Fatalf("first request: %s %v", resp.Summary(), err)
	}
	var bad atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := h.Handle(context.Background(), req)
			if err != nil || resp.Status != 201 || !resp.Replayed {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d replays were not a replayed 201", n)
	}
	if n := transfers(b, pool); n != 1 {
		b.Fatalf("%d transfers, want 1", n)
	}
}
