// Package zoo holds reference targets: small transfer APIs of our own that
// speak the lesson's contract (POST /transfers with an Idempotency-Key, a
// Bearer token, {"from","to","amountKobo"}; GET /accounts/{id} for the
// owner), each with exactly one defect that real idempotency libraries
// have. A check of someone else's server earns trust when the member with
// its defect fails it, by name, and the correct member passes (issue 27).
//
// The mechanics are here, once: the bank (a map standing for the database,
// shared by copies and outliving a restart) and the handler. Each member's
// file says what its defect is, where real code has it, and which of the
// handler's few choices it makes differently.
package zoo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Member is one reference target: a name, the class of defect it has, and
// how its handler differs from the correct one.
type Member struct {
	// Name is how tests and docs call it.
	Name string
	// Class is the defect in one line ("" for the correct member).
	Class string
	// Defect is the member's choices; the zero value is the correct target.
	Defect Defect
}

// Transfer is a request's body, parsed.
type Transfer struct {
	From       int64 `json:"from"`
	To         int64 `json:"to"`
	AmountKobo int64 `json:"amountKobo"`
}

// Defect is where a member's key store departs from the lesson's. Each
// field is one choice of a real store; the zero value is the correct one.
type Defect struct {
	// Scope is what the store finds a key's answer by (nil: the user and
	// the key, as the lesson scopes keys).
	Scope func(user, key string) string
	// Fingerprint is what a key is bound to (nil: the user's parsed
	// request, so the same JSON in other bytes is the same request).
	Fingerprint func(user string, raw []byte, t Transfer) string
	// Keep says which answers are stored under their key (nil: every final
	// answer, refusals included).
	Keep func(status int) bool
	// InMemory keeps the keys in the serving process, not in the bank's
	// database: a restart forgets them and a second copy never sees them.
	InMemory bool
	// ReplayOthers looks a key the user has not used up under every user:
	// another user's stored answer to the same body is replayed.
	ReplayOthers bool
	// Keyless accepts a request without a key as a transfer.
	Keyless bool
	// IgnoreKeys never looks a key up: every request is a new transfer.
	IgnoreKeys bool
	// NotYours is the status of a transfer from someone else's account
	// (0: the lesson's 404).
	NotYours int

	// The defects below are made for the target audit (bank-sim audit
	// --target): each is seen by one rule of chaos --target alone.

	// AnswerOthers, with keys found by their text (Scope), answers another
	// user's request under a key it holds with its stored answer whatever
	// the body: their own transfer is told the first user's. The store
	// sits after the handler's check that the payer's account is the
	// caller's, so only the caller's own transfers reach it.
	AnswerOthers bool
	// RefusalStatus is the status of a refusal for want of funds or over
	// the limit (0: the lesson's 422).
	RefusalStatus int
	// ReplayStatus is the status a stored 201 is replayed with (0: 201).
	ReplayStatus int
	// ClaimOnRequestContext gives up a request whose client went away
	// while it worked without releasing its key: 409 for ever.
	ClaimOnRequestContext bool
	// AnswerOnRequestContext stores the answer with the request's context:
	// when the client went away, the transfer stays and the key is
	// released, so the retry pays again.
	AnswerOnRequestContext bool
	// TwoStep debits and credits in two steps, the bank unlocked in
	// between: the money is missing while in flight.
	TwoStep bool
	// CheckPayee checks the payee's balance, not the payer's.
	CheckPayee bool
	// RetryRefusals stores a refusal for want of funds, but a retry with
	// its key runs the transfer again: once money arrived, it moves it.
	RetryRefusals bool
}

// Correct is the lesson's target: keys scoped to the user, bound to the
// parsed request, every final answer stored in the database.
var Correct = Member{Name: "correct"}

// Members lists every member, the correct one first.
func Members() []Member {
	return []Member{Correct, NoKeys, SharedKeys, CrossUserReplay, Keyless, RawBody, NoFingerprint, Only2xx, MemoryKeys}
}

// AuditMembers are the members made for the target audit (bank-sim audit
// --target), over NewAuditBank: each is seen by one rule of chaos --target
// alone. Probe is not asked about them; Members' are judged by both.
func AuditMembers() []Member {
	return []Member{SharedAnswers, Refusal400, Replay200, ClaimOnRequestContext, AnswerOnRequestContext, TwoStepTransfer, PayeeBalance, RetriedRefusal}
}

// Lesson's users, as bank-sim's demo tokens name them.
var (
	tokens = map[string]string{"token-ada": "ada", "token-bola": "bola", "token-chidi": "chidi"}
	// Account 4 is dana's, who has no token: the account a test closes
	// (Bank.Close) for the refusal of a closed recipient.
	owners = map[int64]string{1: "ada", 2: "bola", 3: "chidi", 4: "dana"}
)

// Bank is a member's database: the lesson's three accounts (₦75,000 in
// all), and the keys of a store that keeps them there. Copies of a member
// share one Bank; a restart keeps it.
type Bank struct {
	mu       sync.Mutex
	balances map[int64]int64
	nextID   int64
	keys     map[string]*answer
	closed   map[int64]bool

	// Limit is the most one transfer may move (0: no limit).
	Limit int64
	// Work is how long a keyed transfer takes inside the server, its key
	// claimed (0: none).
	Work time.Duration
}

// NewBank is the lesson's opening bank.
func NewBank() *Bank {
	return &Bank{balances: map[int64]int64{1: 5_000_000, 2: 2_000_000, 3: 500_000, 4: 0}, keys: map[string]*answer{}, closed: map[int64]bool{}}
}

// Close closes account id: a transfer to it is refused 422
// recipient_unavailable until Reopen.
func (b *Bank) Close(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed[id] = true
}

// Reopen reopens account id.
func (b *Bank) Reopen(id int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.closed, id)
}

// NewAuditBank is the target audit's bank: bola opens with less than any
// of chaos's transfers (₦100 to ₦199.99) and a ₦195 limit refuses a few
// whatever the balances, so a flaw in refusals or in the payer's balance
// shows on every seed; a transfer takes 5 ms, so a client that resets its
// connection just after sending (chaos's disconnect, 0 to 4 ms) is gone
// before the answer is stored.
func NewAuditBank() *Bank {
	return &Bank{balances: map[int64]int64{1: 5_000_000, 2: 5_000, 3: 100}, keys: map[string]*answer{}, closed: map[int64]bool{},
		Limit: 19_500, Work: 5 * time.Millisecond}
}

// Total is the money in the bank, in kobo.
func (b *Bank) Total() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var t int64
	for _, v := range b.balances {
		t += v
	}
	return t
}

// answer is a key's: claimed (not done) while its request works.
type answer struct {
	user        string
	fingerprint string
	done        bool
	status      int
	body        []byte
}

// Server is one process of a member, listening on 127.0.0.1.
type Server struct {
	h    http.Handler
	d    Defect
	bank *Bank
	keys map[string]*answer // the process's memory (Defect.InMemory)

	mu       sync.Mutex // guards srv and restarts
	addr     string
	srv      *http.Server
	restarts int
}

// Start serves m on a free port of 127.0.0.1 over bank. Close it when done.
func Start(m Member, bank *Bank) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{d: m.Defect, bank: bank, addr: ln.Addr().String()}
	s.h = s
	s.serve(ln)
	return s, nil
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.addr }

// Close stops the server.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv.Close()
}

func (s *Server) serve(ln net.Listener) {
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 5 * time.Second}
	go func(srv *http.Server) { _ = srv.Serve(ln) }(s.srv)
}

// Restart is the process restarting (a redeploy, a crash): it stops
// answering, forgets what was in its memory, and listens again on the same
// address. The bank, in the database, stays.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.srv.Close()
	if s.bank != nil {
		s.bank.mu.Lock()
		s.keys = nil
		s.bank.mu.Unlock()
	}
	s.restarts++
	var ln net.Listener
	var err error
	for range 50 { // the old socket may linger a moment
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", s.addr, err)
	}
	s.serve(ln)
	return nil
}

// Restarts is how many times the server was restarted.
func (s *Server) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// ServeHTTP is the lesson's contract. A key is claimed under the bank's
// lock, the transfer made under it, the answer stored under it: the zoo's
// defects are in what is stored and when, not in races.
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	user, ok := tokens[strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")]
	if !ok {
		write(w, 401, map[string]any{"code": "unauthorized"})
		return
	}
	if req.Method == "GET" && strings.HasPrefix(req.URL.Path, "/accounts/") {
		s.account(w, user, strings.TrimPrefix(req.URL.Path, "/accounts/"))
		return
	}
	if req.Method != "POST" || req.URL.Path != "/transfers" {
		write(w, 404, map[string]any{"code": "not_found"})
		return
	}
	key := req.Header.Get("Idempotency-Key")
	if key == "" && !s.d.Keyless {
		write(w, 400, map[string]any{"code": "idempotency_key_required"})
		return
	}
	var raw json.RawMessage
	var t Transfer
	if err := json.NewDecoder(req.Body).Decode(&raw); err != nil || json.Unmarshal(raw, &t) != nil {
		write(w, 400, map[string]any{"code": "bad_body"})
		return
	}
	if s.d.AnswerOthers && owners[t.From] != user {
		write(w, max(s.d.NotYours, 404), map[string]any{"code": "account_not_found"})
		return
	}
	s.bank.mu.Lock()
	if key == "" || s.d.IgnoreKeys {
		status, doc := s.transfer(user, t)
		s.bank.mu.Unlock()
		write(w, status, doc)
		return
	}
	keys := s.bank.keys
	if s.d.InMemory {
		if s.keys == nil {
			s.keys = map[string]*answer{}
		}
		keys = s.keys
	}
	k, fp := user+"\x00"+key, user+":"+fingerprint(t)
	if s.d.Scope != nil {
		k = s.d.Scope(user, key)
	}
	if s.d.Fingerprint != nil {
		fp = s.d.Fingerprint(user, raw, t)
	}
	if old, seen := keys[k]; seen {
		s.bank.mu.Unlock()
		switch {
		case old.fingerprint != fp && !(s.d.AnswerOthers && old.user != user):
			write(w, 422, map[string]any{"code": "idempotency_key_reused"})
		case !old.done:
			write(w, 409, map[string]any{"code": "request_in_progress"})
		case s.d.RetryRefusals && bytes.Contains(old.body, []byte(`"insufficient_funds"`)):
			s.retry(w, user, t, old)
		case s.d.ReplayStatus != 0 && old.status == 201:
			replay(w, s.d.ReplayStatus, old.body)
		default:
			replay(w, old.status, old.body)
		}
		return
	}
	if s.d.ReplayOthers {
		for other, old := range keys {
			if old.done && strings.HasSuffix(other, "\x00"+key) && strings.HasSuffix(old.fingerprint, ":"+fingerprint(t)) {
				s.bank.mu.Unlock()
				replay(w, old.status, old.body)
				return
			}
		}
	}
	a := &answer{user: user, fingerprint: fp}
	keys[k] = a
	s.bank.mu.Unlock()

	if s.bank.Work > 0 {
		select {
		case <-time.After(s.bank.Work):
		case <-req.Context().Done():
			if s.d.ClaimOnRequestContext {
				panic(http.ErrAbortHandler) // the claim is never released
			}
		}
	}
	s.bank.mu.Lock()
	status, doc := s.transfer(user, t)
	b, _ := json.Marshal(doc)
	switch {
	case s.d.Keep != nil && !s.d.Keep(status):
		delete(keys, k)
	case s.d.AnswerOnRequestContext && req.Context().Err() != nil:
		delete(keys, k) // the answer's write failed with the request's context; the transfer stays
		s.bank.mu.Unlock()
		panic(http.ErrAbortHandler)
	default:
		a.done, a.status, a.body = true, status, b
	}
	s.bank.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// retry runs a refused transfer again for a retry of its key
// (Defect.RetryRefusals): a transfer replaces the stored refusal, another
// refusal is answered as the stored one.
func (s *Server) retry(w http.ResponseWriter, user string, t Transfer, old *answer) {
	s.bank.mu.Lock()
	if old.status == 201 { // another retry moved it meanwhile
		status, body := old.status, old.body
		s.bank.mu.Unlock()
		replay(w, status, body)
		return
	}
	status, doc := s.transfer(user, t)
	if status != 201 {
		status, body := old.status, old.body
		s.bank.mu.Unlock()
		replay(w, status, body)
		return
	}
	b, _ := json.Marshal(doc)
	old.status, old.body = status, b
	s.bank.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// replay writes a stored answer, marked as replayed.
func replay(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Idempotent-Replayed", "true")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// transfer is the bank's transfer, correct in every member: every rule
// checked before the money moves. The caller holds the bank's lock.
func (s *Server) transfer(user string, t Transfer) (int, map[string]any) {
	_, toExists := owners[t.To]
	checked := t.From
	if s.d.CheckPayee {
		checked = t.To
	}
	switch {
	case owners[t.From] != user:
		return max(s.d.NotYours, 404), map[string]any{"code": "account_not_found"}
	case !toExists || t.From == t.To || s.bank.closed[t.To]:
		return 422, map[string]any{"code": "recipient_unavailable"}
	case t.AmountKobo <= 0:
		return 422, map[string]any{"code": "invalid_amount"}
	case s.bank.Limit > 0 && t.AmountKobo > s.bank.Limit:
		return s.refusal(), map[string]any{"code": "limit_exceeded"}
	case s.bank.balances[checked] < t.AmountKobo:
		return s.refusal(), map[string]any{"code": "insufficient_funds"}
	}
	s.bank.balances[t.From] -= t.AmountKobo
	if s.d.TwoStep {
		// The credit is a second step: the money is nowhere meanwhile.
		s.bank.mu.Unlock()
		time.Sleep(max(s.bank.Work, time.Millisecond))
		s.bank.mu.Lock()
	}
	s.bank.balances[t.To] += t.AmountKobo
	s.bank.nextID++
	return 201, map[string]any{"transferId": s.bank.nextID, "from": t.From, "to": t.To, "amountKobo": t.AmountKobo, "balanceKobo": s.bank.balances[t.From]}
}

// refusal is the status of a refusal for want of funds or over the limit.
func (s *Server) refusal() int {
	if s.d.RefusalStatus != 0 {
		return s.d.RefusalStatus
	}
	return 422
}

// fingerprint is a parsed request's identity, without its user.
func fingerprint(t Transfer) string { return fmt.Sprintf("%d>%d:%d", t.From, t.To, t.AmountKobo) }

// account answers GET /accounts/{id} to its owner only.
func (s *Server) account(w http.ResponseWriter, user, id string) {
	var n int64
	if _, err := fmt.Sscan(id, &n); err != nil || owners[n] != user {
		write(w, 404, map[string]any{"code": "account_not_found"})
		return
	}
	s.bank.mu.Lock()
	b := s.bank.balances[n]
	s.bank.mu.Unlock()
	write(w, 200, map[string]any{"id": n, "balanceKobo": b})
}

func write(w http.ResponseWriter, status int, doc map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(doc)
}
