package probe_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/banksim/bank-sim/probe"
)

// redirector is a loopback target that answers every request matching
// redirect with a 307 to elsewhere, a second loopback listener standing for
// another host, which counts what reaches it.
type redirector struct {
	target, elsewhere string
	reached           atomic.Int64
}

func startRedirector(t *testing.T, redirect func(*http.Request) bool) *redirector {
	t.Helper()
	r := &redirector{}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.reached.Add(1)
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"transferId":1,"balanceKobo":1}`))
	}))
	t.Cleanup(other.Close)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if redirect(req) {
			http.Redirect(w, req, other.URL+req.URL.RequestURI(), http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == "GET" && strings.HasPrefix(req.URL.Path, "/accounts/"):
			_, _ = w.Write([]byte(`{"balanceKobo":5000000}`))
		default:
			w.WriteHeader(201)
			_, _ = w.Write([]byte(`{"transferId":1,"balanceKobo":4990000}`))
		}
	}))
	t.Cleanup(target.Close)
	r.target, r.elsewhere = target.URL, other.URL
	return r
}

// A target that redirects is refused, said so, and nothing the probe sends
// reaches the address it redirected to: neither the transfer nor a balance
// read.
func TestTheProbeRefusesARedirect(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		redirect func(*http.Request) bool
		balances bool
	}{
		{"the transfer", func(r *http.Request) bool { return r.Method == "POST" }, false},
		{"a balance read", func(r *http.Request) bool { return r.Method == "GET" }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := startRedirector(t, tc.redirect)
			cfg := lesson(r.target)
			if tc.balances {
				cfg.Balances = &probe.HTTPBalances{Template: r.target + "/accounts/{id}", Field: "balanceKobo", Auth: cfg.Contract, Timeout: 5 * time.Second,
					Owner: probe.Owners(cfg.Payer, cfg.Payee)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := probe.Run(ctx, cfg)
			var usage *probe.UsageError
			if !errors.As(err, &usage) {
				t.Fatalf("probe of a redirecting target: %v, want a usage error", err)
			}
			host := strings.TrimPrefix(r.elsewhere, "http://")
			if want := "answered 307 redirecting to " + host; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "bank-sim does not follow redirects") {
				t.Errorf("the error does not say %q and that redirects are not followed: %v", want, err)
			}
			if n := r.reached.Load(); n != 0 {
				t.Errorf("%d request(s) reached the address the target redirected to", n)
			}
		})
	}
}
