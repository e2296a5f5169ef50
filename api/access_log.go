package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Access is one request as the server saw it: who asked for what, and what
// they were told. It is for logs and pictures of a run, not for deciding
// anything.
type Access struct {
	Method string
	Path   string // with the query
	// User is the user the bearer token names (0 for none or an unknown
	// one), looked up only after the answer was sent.
	User    int64
	Key     string
	Intent  string // X-Bank-Sim-Intent, the simulator's label
	Attempt int    // X-Bank-Sim-Attempt
	// Status, Replayed, Code and TransferID describe the answer (zero
	// values until it is written).
	Status     int
	Replayed   bool
	Code       string
	TransferID int64
	AmountKobo int64 // of a transfer's receipt
	Duration   time.Duration
}

// LogRequests wraps an API handler: arrived (when not nil) hears of each
// request as it arrives, done of each as it is answered. tokens are the
// bearer tokens, to name the user in the log.
func LogRequests(next http.Handler, tokens map[string]int64, arrived, done func(Access)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := Access{Method: r.Method, Path: r.URL.RequestURI(), Key: r.Header.Get(HeaderKey), Intent: r.Header.Get(HeaderIntent)}
		a.Attempt, _ = strconv.Atoi(r.Header.Get(HeaderAttempt))
		if arrived != nil {
			arrived(a)
		}
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		a.Duration = time.Since(start)
		a.Status = rec.status
		if a.Status == 0 {
			a.Status = http.StatusOK
		}
		a.Replayed = rec.Header().Get(HeaderReplayed) == "true"
		var body struct {
			Code       string `json:"code"`
			TransferID int64  `json:"transferId"`
			AmountKobo int64  `json:"amountKobo"`
		}
		if json.Unmarshal(rec.body.Bytes(), &body) == nil {
			a.Code, a.TransferID, a.AmountKobo = body.Code, body.TransferID, body.AmountKobo
		}
		// The user is looked up after the answer is out, so that this
		// plain map lookup cannot add to the time a client can measure.
		if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
			a.User = tokens[strings.TrimSpace(h[7:])]
		}
		if done != nil {
			done(a)
		}
	})
}

// recorder keeps the status and the start of the body of an answer.
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

const recordBody = 4 << 10

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := recordBody - w.body.Len(); room > 0 {
		w.body.Write(p[:min(len(p), room)])
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
