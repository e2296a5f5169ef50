// Package judge says what a transfer API's answer means to the client that
// sent it: a transfer made, a replay of one, a refusal of the key, a refusal
// of the request, work still in progress, a server error, or an answer the
// lesson never gives. probe and chaos --target both judge answers here, so
// that the two never call one answer by different names (issue 27: chaos
// took a 417 for a contract violation while probe took it for a refusal).
//
// The defaults are the lesson's: 422 with a code that names the key
// (idempotency_key_reused) refuses a key used for another request; other
// 4xx the lesson gives (400, 401, 403, 404, 422) refuse the request; 409 and
// 429 say try again; 5xx is the server's failure. A team whose server
// refuses a key its own way says so with Rules (--key-refusal 417,
// --key-refusal 422:IDEMPOTENCY_FINGERPRINT_MISMATCH).
package judge

import (
	"fmt"
	"strconv"
	"strings"
)

// Class is what an answer means to its client.
type Class string

// The classes of answers.
const (
	Success         Class = "success"          // 2xx: the transfer was made
	Replay          Class = "replay"           // 2xx marked as a replay by the target's header
	KeyRefusal      Class = "key refusal"      // the key was used before for another request
	BusinessRefusal Class = "business refusal" // the request itself is refused (funds, owner, no key, …)
	InProgress      Class = "in progress"      // 409 or 429: try again later
	ServerError     Class = "server error"     // 5xx
	Other           Class = "other"            // an answer the lesson never gives
)

// Refusal reports whether c is a final refusal of either kind.
func (c Class) Refusal() bool { return c == KeyRefusal || c == BusinessRefusal }

// Rule is a target's own refusal of a reused key: a status and, when the
// target gives one, the error code in the body (compared without case).
type Rule struct {
	Status int    `json:"status"`
	Code   string `json:"code,omitempty"`
}

// ParseRule reads STATUS or STATUS:CODE, as --key-refusal takes it.
func ParseRule(s string) (Rule, error) {
	st, code, _ := strings.Cut(strings.TrimSpace(s), ":")
	n, err := strconv.Atoi(strings.TrimSpace(st))
	if err != nil || n < 400 || n > 499 {
		return Rule{}, fmt.Errorf("%q: want STATUS or STATUS:CODE with a 4xx status, like 417 or 422:IDEMPOTENCY_FINGERPRINT_MISMATCH", s)
	}
	code = strings.TrimSpace(code)
	if strings.ContainsAny(code, " \t\r\n") {
		return Rule{}, fmt.Errorf("%q: the code must be one word, as the body's error code field spells it", s)
	}
	return Rule{Status: n, Code: code}, nil
}

// String is the rule as --key-refusal takes it.
func (r Rule) String() string {
	if r.Code == "" {
		return strconv.Itoa(r.Status)
	}
	return fmt.Sprintf("%d:%s", r.Status, r.Code)
}

func (r Rule) matches(status int, code string) bool {
	return status == r.Status && (r.Code == "" || strings.EqualFold(r.Code, code))
}

// Judge classifies answers: the lesson's defaults and the target's own
// key refusals.
type Judge struct {
	// KeyRefusals are the target's own ways of refusing a reused key
	// (--key-refusal), tried before the defaults: a team may map 409 with
	// its own code too.
	KeyRefusals []Rule `json:"keyRefusals,omitempty"`
}

// Class is what an answer of status, with the body's error code and the
// target's replay mark, means.
func (j Judge) Class(status int, code string, replayed bool) Class {
	for _, r := range j.KeyRefusals {
		if r.matches(status, code) {
			return KeyRefusal
		}
	}
	switch {
	case status >= 200 && status < 300 && replayed:
		return Replay
	case status >= 200 && status < 300:
		return Success
	case status == 409 || status == 429:
		return InProgress
	case status >= 500:
		return ServerError
	case status == 422 && strings.Contains(strings.ToLower(code), "key"):
		return KeyRefusal
	case status == 400 || status == 401 || status == 403 || status == 404 || status == 422:
		return BusinessRefusal
	}
	return Other
}

// Unrecognised says, of an answer of status and code to a reused key that
// the judge did not take for a key refusal, why it is not one and the flag
// that would map it: the reader learns what bank-sim could not name, and
// how to name it.
func (j Judge) Unrecognised(status int, code string) string {
	rule := Rule{Status: status, Code: code}
	return fmt.Sprintf("not a refusal of the key that bank-sim recognises (the lesson's: 422 with a code naming the key, like idempotency_key_reused), "+
		"so the refusal may be of the request rather than of its key; if it is how this target refuses a key used for another request, say so with --key-refusal %s", rule)
}
