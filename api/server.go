// Package api serves the transfer endpoint over HTTP: bearer tokens for who
// is asking, a strict decoder for what they ask, the idempotency handler for
// doing it once, and RFC 9457 problem details for every refusal, following
// the IETF Idempotency-Key draft (400 without a key, 422 for a key reused
// with another body, 409 while the first request is in progress).
//
// Routes:
//
//	POST /transfers          Authorization, Idempotency-Key, {"from","to","amountKobo"}
//	GET  /transfers/{id}     a transfer from one of the caller's accounts
//	GET  /transfers?key=K    the stored answer to the caller's key K: how a
//	                         client resolves an outcome it never heard
//	GET  /accounts/{id}      the caller's own account (404 for anyone else's)
//	GET  /sms                the SMS the provider sent to the caller's phone
//	                         (when the server sends SMS through an outbox)
//	GET  /healthz            200 when PostgreSQL answers
package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/idem"
	"github.com/banksim/bank-sim/outbox"
	"github.com/jackc/pgx/v5"
)

// Headers of the API.
const (
	HeaderKey        = "Idempotency-Key"
	HeaderReplayed   = "Idempotent-Replayed"
	HeaderRetryAfter = "Retry-After"
	// HeaderIntent is not part of the API: it is the simulator's oracle. The
	// harness labels each client intent so that the invariant checker can
	// count, from the ledger alone, how often one intent moved money (see
	// bank.WithIntent). A real bank recognises an intent by its key only.
	HeaderIntent = "X-Bank-Sim-Intent"
	// HeaderAttempt is also the simulator's: the client numbers its attempts
	// so that a fault proxy can fail, say, only the first. Servers ignore it.
	HeaderAttempt = "X-Bank-Sim-Attempt"
)

// DefaultMaxBody is the largest request body accepted. A transfer is three
// numbers; anything near this size is a mistake or an attack.
const DefaultMaxBody = 1 << 10

// Config is what a server needs.
type Config struct {
	// Handler does the transfer; its DB also answers the GET routes.
	Handler *idem.Handler
	// Tokens maps bearer tokens to user ids; DemoTokens() for the lesson.
	Tokens map[string]int64
	// MaxBody is the body limit in bytes; DefaultMaxBody when zero.
	MaxBody int64
	// RetryAfter is the Retry-After sent with 409; 1 s when zero.
	RetryAfter time.Duration
	// Log, when set, is told about unexpected failures (500s).
	Log func(format string, args ...any)
	// SMS, when set, is the SMS provider the server's outbox sends to;
	// GET /sms shows the caller the messages it sent to their phone.
	SMS *outbox.Provider
	// Flaws switches on mistakes of the HTTP layer; the zero value is the
	// correct server.
	Flaws Flaws
}

// Flaws are mistakes the HTTP layer can make around a correct handler:
// nothing in process shows them (chaos runs its handler without api/), only
// a run over HTTP.
type Flaws struct {
	// ReencodedReplays answers a replay through a JSON helper, as a
	// framework's response helpers do: the stored body is decoded and
	// encoded again, so its members come out in another order (Go sorts a
	// map's keys) and the replay is not the first answer byte for byte. A
	// client that compares the bytes, or verifies a signature over them,
	// sees another answer.
	ReencodedReplays bool `json:"reencodedReplays,omitempty"`
}

type server struct {
	cfg    Config
	tokens *tokens
	db     bank.DB
}

// NewServer returns the API as an http.Handler. Serve it with Serve (or
// Listener and ConnContext): only then can it refuse a request framed two
// ways, which net/http reads one way without a word.
func NewServer(cfg Config) http.Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = time.Second
	}
	s := &server{cfg: cfg, tokens: newTokens(cfg.Tokens), db: cfg.Handler.DB}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /transfers", s.authed(s.postTransfer))
	mux.HandleFunc("GET /transfers", s.authed(s.getTransferByKey))
	mux.HandleFunc("GET /transfers/{id}", s.authed(s.getTransfer))
	mux.HandleFunc("GET /accounts/{id}", s.authed(s.getAccount))
	mux.HandleFunc("GET /healthz", s.healthz)
	if cfg.SMS != nil {
		mux.HandleFunc("GET /sms", s.authed(s.getSMS))
		mux.HandleFunc("/sms", methodNotAllowed("GET"))
	}
	// The mux's own 404 and 405 are text/plain; these give problem details.
	mux.HandleFunc("/transfers", methodNotAllowed("GET, POST"))
	mux.HandleFunc("/transfers/{id}", methodNotAllowed("GET"))
	mux.HandleFunc("/accounts/{id}", methodNotAllowed("GET"))
	mux.HandleFunc("/healthz", methodNotAllowed("GET"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(404, CodeNotFound, "No such route: "+r.URL.Path))
	})
	return strict(mux)
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeProblem(w, newProblem(405, CodeMethodNotAllowed, r.Method+" is not allowed here; use "+allow))
	}
}

type userKey struct{}

// authed runs next only for a request with a valid bearer token, with the
// user in its context. The user id comes only from the token.
func (s *server) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p, dup := duplicated(r, "Authorization"); dup {
			writeProblem(w, p)
			return
		}
		user, ok := s.tokens.user(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="bank-sim"`)
			writeProblem(w, newProblem(401, CodeUnauthorized, "Send Authorization: Bearer TOKEN with a valid token"))
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	}
}

func userOf(r *http.Request) int64 { return r.Context().Value(userKey{}).(int64) }

func (s *server) postTransfer(w http.ResponseWriter, r *http.Request) {
	// Everything that can be refused without the database is refused first,
	// so a malformed request never writes a row, not even a key.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeProblem(w, newProblem(415, CodeUnsupportedMedia, "Send the body as Content-Type: application/json"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeProblem(w, newProblem(413, CodeBodyTooLarge, fmt.Sprintf("The body may be at most %d bytes", s.cfg.MaxBody)))
		return
	case err != nil:
		// The client went away mid-body; nobody is listening for an answer.
		writeProblem(w, newProblem(400, bank.CodeInvalidRequest, "The body could not be read"))
		return
	}
	if p, dup := duplicated(r, HeaderKey); dup {
		writeProblem(w, p)
		return
	}
	key := r.Header.Get(HeaderKey)
	if !idem.ValidKey(key) {
		writeProblem(w, ProblemFor(idem.KeyRequired()))
		return
	}
	if _, derr := DecodeTransfer(body); derr != nil {
		writeProblem(w, newProblem(400, derr.Code, derr.Message))
		return
	}

	ctx := r.Context()
	if intent := r.Header.Get(HeaderIntent); intent != "" && len(intent) <= 100 {
		ctx = bank.WithIntent(ctx, intent)
	}
	resp, err := s.cfg.Handler.Handle(ctx, idem.Request{UserID: userOf(r), Key: key, Body: body})
	if err != nil && s.stopping() {
		// The server is stopping and cut the work short: the transaction
		// rolled back and the key was released, so the retry is safe, to
		// this server once it is back or to another.
		s.logf("POST /transfers key %s: stopped: %v", key, err)
		w.Header().Set(HeaderRetryAfter, strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
		writeProblem(w, newProblem(503, CodeUnavailable, "The server is shutting down; retry with the same Idempotency-Key"))
		return
	}
	if err != nil {
		s.logf("POST /transfers key %s: %v", key, err)
		// Never stored: a retry with the same key runs the transfer again.
		writeProblem(w, newProblem(500, CodeInternal, "Something went wrong; retrying with the same Idempotency-Key is safe"))
		return
	}
	s.writeResponse(w, resp)
}

// writeResponse sends a bank response: successes as they were stored, byte
// for byte (a replay is the original answer), refusals as problem details.
func (s *server) writeResponse(w http.ResponseWriter, resp bank.Response) {
	if resp.Replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	if resp.Status == 409 {
		w.Header().Set(HeaderRetryAfter, strconv.Itoa(int((s.cfg.RetryAfter+time.Second-1)/time.Second)))
	}
	if !resp.OK() {
		writeProblem(w, ProblemFor(resp))
		return
	}
	if rc, ok := resp.Receipt(); ok && resp.Status == 201 {
		w.Header().Set("Location", fmt.Sprintf("/transfers/%d", rc.TransferID))
	}
	if resp.Replayed && s.cfg.Flaws.ReencodedReplays {
		var v any
		if json.Unmarshal(resp.Body, &v) == nil {
			writeJSON(w, resp.Status, v)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// getTransferByKey answers with what the key's request was (or is being)
// answered, so a client that gave up can learn the outcome: the stored
// response with Idempotent-Replayed, 409 while it is in progress, and 404
// when no request with this key ever arrived (then sending it again is safe).
func (s *server) getTransferByKey(w http.ResponseWriter, r *http.Request) {
	if keys := r.URL.Query()["key"]; len(keys) > 1 {
		writeProblem(w, newProblem(400, bank.CodeInvalidRequest, "Send the key query parameter once"))
		return
	}
	key := r.URL.Query().Get("key")
	if !idem.ValidKey(key) {
		writeProblem(w, ProblemFor(idem.KeyRequired()))
		return
	}
	var status string
	var respStatus *int32
	var body *string
	err := s.db.QueryRow(r.Context(),
		"SELECT status, response_status, response_body FROM idempotency_keys WHERE user_id = $1 AND key = $2",
		userOf(r), key).Scan(&status, &respStatus, &body)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeProblem(w, newProblem(404, CodeUnknownKey, "No request with this Idempotency-Key has arrived; sending it again is safe"))
	case err != nil:
		s.dbFailed(w, r, err)
	case status != "completed" || respStatus == nil || body == nil:
		s.writeResponse(w, idem.InProgress())
	default:
		s.writeResponse(w, bank.Response{Status: int(*respStatus), Body: []byte(*body), Replayed: true})
	}
}

// getTransfer shows a transfer to the owner of the account it came from; to
// everyone else it does not exist.
func (s *server) getTransfer(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r)
	var t bank.TransferRow
	err := pgx.ErrNoRows
	if ok {
		err = s.db.QueryRow(r.Context(), `
			SELECT t.id, t.from_account, t.to_account, t.amount_kobo
			FROM transfers t JOIN accounts a ON a.id = t.from_account
			WHERE t.id = $1::bigint AND a.owner_id = $2`, id, userOf(r)).Scan(&t.ID, &t.From, &t.To, &t.AmountKobo)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeProblem(w, newProblem(404, CodeNotFound, fmt.Sprintf("Transfer %s was not found", r.PathValue("id"))))
	case err != nil:
		s.dbFailed(w, r, err)
	default:
		writeJSON(w, 200, map[string]int64{"transferId": t.ID, "from": t.From, "to": t.To, "amountKobo": t.AmountKobo})
	}
}

// getAccount shows an account to its owner. A stranger's account and a
// missing one give the same 404, so account numbers cannot be probed.
func (s *server) getAccount(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(r)
	var a bank.Account
	err := pgx.ErrNoRows
	if ok {
		err = s.db.QueryRow(r.Context(),
			"SELECT id, owner_id, holder, status, balance_kobo FROM accounts WHERE id = $1::bigint AND owner_id = $2",
			id, userOf(r)).Scan(&a.ID, &a.OwnerID, &a.Holder, &a.Status, &a.BalanceKobo)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		writeProblem(w, newProblem(404, bank.CodeAccountNotFound, fmt.Sprintf("Account %s was not found", r.PathValue("id"))))
	case err != nil:
		s.dbFailed(w, r, err)
	default:
		writeJSON(w, 200, a)
	}
}

// smsView is one SMS as GET /sms shows it.
type smsView struct {
	ID         int64  `json:"id"`
	Text       string `json:"text"`
	TransferID int64  `json:"transferId"`
}

// getSMS shows the caller the SMS the provider sent to their phone, oldest
// first: what the customer saw, which is how a person checks that a transfer
// texted them once.
func (s *server) getSMS(w http.ResponseWriter, r *http.Request) {
	msgs := []smsView{}
	for _, m := range s.cfg.SMS.MessagesTo(userOf(r)) {
		msgs = append(msgs, smsView{ID: m.ID, Text: m.Text, TransferID: m.TransferID})
	}
	writeJSON(w, 200, map[string][]smsView{"messages": msgs})
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	var one int
	if err := s.db.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		writeProblem(w, newProblem(503, CodeUnavailable, "PostgreSQL is not answering"))
		return
	}
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

func (s *server) dbFailed(w http.ResponseWriter, r *http.Request, err error) {
	s.logf("%s %s: %v", r.Method, r.URL.Path, err)
	writeProblem(w, newProblem(500, CodeInternal, "Something went wrong; try again"))
}

// stopping reports whether the handler's Stopping context is done.
func (s *server) stopping() bool {
	st := s.cfg.Handler.Stopping
	return st != nil && st.Err() != nil
}

// duplicated refuses a request that carries header more than once. Which copy
// counts is not defined (net/http reads the first, a proxy in front may read
// the last), so two parsers could read one request two ways: two
// Idempotency-Keys would let the key that was checked differ from the key
// that was stored, two Authorizations the user that was checked from the
// user that is charged.
func duplicated(r *http.Request, header string) (Problem, bool) {
	if len(r.Header.Values(header)) <= 1 {
		return Problem{}, false
	}
	return newProblem(400, CodeDuplicate, fmt.Sprintf("Send the %s header once; this request has %d", header, len(r.Header.Values(header)))), true
}

func (s *server) logf(format string, args ...any) {
	if s.cfg.Log != nil {
		s.cfg.Log(format, args...)
	}
}

// pathID reads the {id} of a route. Ids are compared as bigint in SQL: an id
// beyond PostgreSQL's integer is one that does not exist (404), not a query
// that cannot be sent.
func pathID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	return id, err == nil && id > 0 && id <= MaxSafeInteger
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b := mustJSON(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
