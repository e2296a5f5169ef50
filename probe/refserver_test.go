package probe_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// refServer is a reference target of our own for the defect classes of
// issue 27: the lesson's transfer contract in plain net/http, accounts kept
// in a "database" (a map that outlives a restart), keys in the process's
// memory. Correct by default; each defect is one field.
type refServer struct {
	// only2xx stores an answer under its key only when it is a success:
	// a refusal is worked out afresh on every retry.
	only2xx bool
	// durable keeps the keys across a restart, as keys in the database
	// are: the correct target of the restart check.
	durable bool
	// notYours is the status of a transfer from someone else's account
	// (404 when zero), refused as invalid where the lesson says not found.
	notYours int
	// keyTextOnly finds a key by its text alone and refuses another user's
	// request under it as a reused key: it tells the second user that the
	// key exists.
	keyTextOnly bool

	mu       sync.Mutex
	balances map[int64]int64
	owners   map[int64]string
	tokens   map[string]string
	nextID   int64
	keys     map[[2]string]refAnswer // by user and key: the process's memory
	restarts int

	addr string
	srv  *http.Server
}

type refAnswer struct {
	fingerprint string
	status      int
	body        []byte
}

// startRef serves a reference target on 127.0.0.1 with the lesson's three
// accounts (₦75,000 in all).
func startRef(t *testing.T, r *refServer) *refServer {
	t.Helper()
	r.balances = map[int64]int64{1: 5_000_000, 2: 2_000_000, 3: 500_000}
	r.owners = map[int64]string{1: "ada", 2: "bola", 3: "chidi"}
	r.tokens = map[string]string{"token-ada": "ada", "token-bola": "bola", "token-chidi": "chidi"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.serve(ln)
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		_ = r.srv.Close()
	})
	return r
}

func (r *refServer) url() string { return "http://" + r.addr }

func (r *refServer) serve(ln net.Listener) {
	r.srv = &http.Server{Handler: http.HandlerFunc(r.handle), ReadHeaderTimeout: 5 * time.Second}
	go func(s *http.Server) { _ = s.Serve(ln) }(r.srv)
}

// restart is the process restarting: it stops answering, forgets the keys
// in its memory, and listens again on the same address. The accounts, in
// the database, stay.
func (r *refServer) restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.srv.Close()
	if !r.durable {
		r.keys = nil
	}
	r.restarts++
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger a moment
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", r.addr, err)
	}
	r.serve(ln)
	return nil
}

// total is the money in the bank.
func (r *refServer) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t int64
	for _, b := range r.balances {
		t += b
	}
	return t
}

// restarted is how many times the target was restarted.
func (r *refServer) restarted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restarts
}

func (r *refServer) handle(w http.ResponseWriter, req *http.Request) {
	if req.Method != "POST" || req.URL.Path != "/transfers" {
		refWrite(w, 404, map[string]any{"code": "not_found"})
		return
	}
	user, ok := r.tokens[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		refWrite(w, 401, map[string]any{"code": "unauthorized"})
		return
	}
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		refWrite(w, 400, map[string]any{"code": "idempotency_key_required"})
		return
	}
	var body struct {
		From, To, AmountKobo int64
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		refWrite(w, 400, map[string]any{"code": "bad_body"})
		return
	}
	fp := fmt.Sprintf("%d>%d:%d", body.From, body.To, body.AmountKobo)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[[2]string]refAnswer{}
	}
	k := [2]string{user, key}
	if r.keyTextOnly {
		k[0] = ""
		fp = user + ":" + fp
	}
	if old, seen := r.keys[k]; seen {
		if old.fingerprint != fp {
			refWrite(w, 422, map[string]any{"code": "idempotency_key_reused"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(old.status)
		_, _ = w.Write(old.body)
		return
	}
	status, doc := r.transfer(user, body.From, body.To, body.AmountKobo)
	b, _ := json.Marshal(doc)
	if !r.only2xx || status < 300 {
		r.keys[k] = refAnswer{fp, status, b}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func (r *refServer) transfer(user string, from, to, amount int64) (int, map[string]any) {
	_, toExists := r.owners[to]
	switch {
	case r.owners[from] != user:
		return max(r.notYours, 404), map[string]any{"code": "account_not_found"}
	case !toExists || from == to:
		return 422, map[string]any{"code": "recipient_unavailable"}
	case amount <= 0:
		return 422, map[string]any{"code": "invalid_amount"}
	case r.balances[from] < amount:
		return 422, map[string]any{"code": "insufficient_funds"}
	}
	r.balances[from] -= amount
	r.balances[to] += amount
	r.nextID++
	return 201, map[string]any{"transferId": r.nextID, "from": from, "to": to, "amountKobo": amount, "balanceKobo": r.balances[from]}
}

func refWrite(w http.ResponseWriter, status int, doc map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(doc)
}
