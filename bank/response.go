package bank

import (
	"encoding/json"
	"fmt"
)

// Response is the transfer endpoint's answer: an HTTP status and a JSON body.
// It is what the idempotency store keeps and replays, so the body stays raw
// JSON rather than a Go type.
type Response struct {
	Status   int             `json:"status"`
	Body     json.RawMessage `json:"body"`
	Replayed bool            `json:"replayed,omitempty"`
}

// Receipt is the body of a successful transfer (201).
type Receipt struct {
	TransferID  int64 `json:"transferId"`
	From        int64 `json:"from"`
	To          int64 `json:"to"`
	AmountKobo  int64 `json:"amountKobo"`
	BalanceKobo int64 `json:"balanceKobo"`
}

// Problem is the body of every refusal: a machine-readable code and a
// sentence for people.
type Problem struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

// Error codes of the transfer endpoint, as the lesson names them.
const (
	CodeInvalidRequest       = "invalid_request"
	CodeInvalidAccount       = "invalid_account"
	CodeInvalidAmount        = "invalid_amount"
	CodeSameAccount          = "same_account"
	CodeAccountNotFound      = "account_not_found"
	CodeAccountNotActive     = "account_not_active"
	CodeRecipientUnavailable = "recipient_unavailable"
	CodeInsufficientFunds    = "insufficient_funds"
)

// Reject builds a refusal.
func Reject(status int, code, message string) Response {
	body, _ := json.Marshal(Problem{Code: code, Message: message})
	return Response{Status: status, Body: body}
}

// Rejectf is Reject with a formatted message.
func Rejectf(status int, code, format string, args ...any) Response {
	return Reject(status, code, fmt.Sprintf(format, args...))
}

// Created builds the 201 answer for a receipt.
func Created(r Receipt) Response {
	body, _ := json.Marshal(r)
	return Response{Status: 201, Body: body}
}

// OK reports whether the transfer happened (2xx).
func (r Response) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Final reports whether the answer is the request's settled outcome. 409 (in
// progress), 429 and 5xx say nothing about the transfer: a client retries
// them, and a checker must not read them as a refusal.
func (r Response) Final() bool {
	return r.Status != 409 && r.Status != 429 && r.Status < 500 && r.Status != 0
}

// Code is the refusal's error code, or "" for a success.
func (r Response) Code() string {
	var p Problem
	if r.OK() || json.Unmarshal(r.Body, &p) != nil {
		return ""
	}
	return p.Code
}

// Receipt decodes a success body.
func (r Response) Receipt() (Receipt, bool) {
	var rc Receipt
	if !r.OK() || json.Unmarshal(r.Body, &rc) != nil {
		return Receipt{}, false
	}
	return rc, true
}

// Summary is the short form the story prints: "201 transfer 1" or
// "422 insufficient_funds".
func (r Response) Summary() string {
	s := fmt.Sprintf("%d", r.Status)
	if r.Replayed {
		s += " replayed"
	}
	if rc, ok := r.Receipt(); ok {
		return fmt.Sprintf("%s transfer %d", s, rc.TransferID)
	}
	if c := r.Code(); c != "" {
		return s + " " + c
	}
	return s
}
