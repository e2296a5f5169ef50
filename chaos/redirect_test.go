package chaos_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/probe"
)

// chaos --target against a loopback target that answers 307 to a second
// loopback listener (another host, as far as the run knows): the run ends
// with a usage error that names the redirect, and not one request reaches
// the second listener, neither the transfers nor the key's lookup.
func TestTargetRunRefusesARedirect(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"POST", "GET"} {
		t.Run(which, func(t *testing.T) {
			var reached atomic.Int64
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				reached.Add(1)
				w.WriteHeader(201)
				_, _ = w.Write([]byte(`{"transferId":1}`))
			}))
			t.Cleanup(other.Close)
			target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == which {
					http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
					return
				}
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(404)
				_, _ = w.Write([]byte(`{"code":"unknown_key"}`))
			}))
			t.Cleanup(target.Close)
			tg := lessonTarget(target.URL)
			tg.Balances, tg.BalancesFrom = nil, ""
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := chaos.RunWith(ctx, nil, chaos.Config{Seed: 5, Clients: 4, Intents: 20, Target: tg}, chaos.Options{})
			var usage *probe.UsageError
			if !errors.As(err, &usage) {
				t.Fatalf("a run against a redirecting target: %v, want a usage error", err)
			}
			host := strings.TrimPrefix(other.URL, "http://")
			if want := "answered 307 redirecting to " + host; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bank-sim does not follow redirects") {
				t.Errorf("the error does not say %q and that redirects are not followed: %v", want, err)
			}
			if n := reached.Load(); n != 0 {
				t.Errorf("%d request(s) reached the address the target redirected to", n)
			}
		})
	}
}
