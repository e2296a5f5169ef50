package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/banksim/bank-sim/bank"
)

// ProblemType is the media type of every error this API sends (RFC 9457).
const ProblemType = "application/problem+json"

// Problem is an RFC 9457 problem details document. Code is an extension
// member: the machine-readable error code of the lesson (insufficient_funds,
// idempotency_key_reused, …), which is what clients should switch on.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	Code   string `json:"code"`
}

// Error codes the HTTP layer adds to those of bank and idem.
const (
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeBodyTooLarge     = "body_too_large"
	CodeUnknownKey       = "unknown_idempotency_key"
	CodeInternal         = "internal_error"
	CodeUnavailable      = "unavailable"
	CodeDuplicate        = "duplicate_header"
)

// ProblemFor turns a refusal of the bank (body {"error","message"}) into
// problem details.
func ProblemFor(resp bank.Response) Problem {
	var p bank.Problem
	_ = json.Unmarshal(resp.Body, &p)
	return newProblem(resp.Status, p.Code, p.Message)
}

func newProblem(status int, code, detail string) Problem {
	return Problem{
		// about:blank says the status code is the problem's whole meaning;
		// Code narrows it down.
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// Response turns problem details back into the bank's refusal, so a client
// can hand what it was told to the same code that judges in-process answers.
func (p Problem) Response() bank.Response {
	return bank.Reject(p.Status, p.Code, p.Detail)
}

func writeProblem(w http.ResponseWriter, p Problem) {
	w.Header().Set("Content-Type", ProblemType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(len(mustJSON(p))))
	w.WriteHeader(p.Status)
	_, _ = w.Write(mustJSON(p))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are marshalled
	}
	return b
}
