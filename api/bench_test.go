package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/api"
)

// poster sends POST /transfers over loopback with keep-alive connections, as
// a busy client would.
type poster struct {
	url string
	hc  *http.Client
}

func newPoster(url string, conns int) *poster {
	return &poster{url: url + "/transfers", hc: &http.Client{Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns,
	}}}
}

// post sends Ada's 1-kobo transfer (or Bola's, to keep money flowing both
// ways) with key, and returns the status.
func (p *poster) post(key string, ada bool) (int, error) {
	body := `{"from":11,"to":21,"amountKobo":1}`
	token := "Bearer token-ada"
	if !ada {
		body, token = `{"from":21,"to":11,"amountKobo":1}`, "Bearer token-bola"
	}
	req, _ := http.NewRequest("POST", p.url, bytes.NewReader([]byte(body)))
	req.Header.Set("Authorization", token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderKey, key)
	res, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// BenchmarkPostTransfers measures POST /transfers through a real server on
// loopback and a real PostgreSQL: every request a new key (a transfer and
// its stored response in one transaction), or one key replayed.
func BenchmarkPostTransfers(b *testing.B) {
	srv, _ := newServer(b, 32)
	p := newPoster(srv.URL, 64)
	if s, err := p.post("bench-replay-0000001", true); err != nil || s != 201 {
		b.Fatalf("seed the replay: %d %v", s, err)
	}
	var n atomic.Int64
	b.Run("NewKeys", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := n.Add(1)
				if s, err := p.post(fmt.Sprintf("bench-new-%012d", i), i%2 == 0); err != nil || s != 201 {
					b.Fatalf("%d %v", s, err)
				}
			}
		})
	})
	b.Run("Replays", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if s, err := p.post("bench-replay-0000001", true); err != nil || s != 201 {
					b.Fatalf("%d %v", s, err)
				}
			}
		})
	})
}

// TestLoad reports requests per second and latency of POST /transfers with
// 16 concurrent clients for 10 s each, with new keys and with replays. It is
// a measurement, not a check: it runs only with BANK_SIM_LOAD=1.
//
//	BANK_SIM_LOAD=1 go test -run TestLoad -v ./api/
func TestLoad(t *testing.T) {
	if os.Getenv("BANK_SIM_LOAD") == "" {
		t.Skip("a 20 s measurement; set BANK_SIM_LOAD=1 to run it")
	}
	const clients, duration = 16, 10 * time.Second
	srv, _ := newServer(t, 32)
	p := newPoster(srv.URL, clients)
	if s, err := p.post("load-replay-00000001", true); err != nil || s != 201 {
		t.Fatalf("seed the replay: %d %v", s, err)
	}
	for _, mode := range []string{"new keys", "replays"} {
		var mu sync.Mutex
		var lat []time.Duration
		var seq atomic.Int64
		ctx, cancel := context.WithTimeout(context.Background(), duration)
		var wg sync.WaitGroup
		start := time.Now()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				for ctx.Err() == nil {
					key := "load-replay-00000001"
					i := seq.Add(1)
					if mode == "new keys" {
						key = fmt.Sprintf("load-new-%012d", i)
					}
					t0 := time.Now()
					s, err := p.post(key, mode == "replays" || (i+int64(c))%2 == 0)
					if err != nil || s != 201 {
						t.Errorf("%s: %d %v", mode, s, err)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		cancel()
		elapsed := time.Since(start)
		slices.Sort(lat)
		if len(lat) == 0 {
			t.Fatalf("%s: no requests completed", mode)
		}
		q := func(f float64) time.Duration { return lat[int(f*float64(len(lat)-1))] }
		t.Logf("%-8s %d clients, %v: %d requests, %.0f req/s, p50 %v, p99 %v",
			mode, clients, elapsed.Round(time.Millisecond), len(lat), float64(len(lat))/elapsed.Seconds(),
			q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond))
	}
}
