package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/banksim/bank-sim/bank"
)

// MaxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER: the largest account
// number or amount the API accepts, because a JSON number above it does not
// survive most clients intact.
const MaxSafeInteger = 1<<53 - 1

// integerLiteral is a JSON number with no fraction and no exponent. 1000.0 and
// 1e3 are refused even though their value is whole: money is counted in kobo,
// and a client that sends a float has a bug worth hearing about.
var integerLiteral = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// DecodeError is why a body was refused, as the API answers it.
type DecodeError struct {
	Code    string // bank.CodeInvalidRequest, CodeInvalidAccount or CodeInvalidAmount
	Message string
}

func (e *DecodeError) Error() string { return e.Code + ": " + e.Message }

func invalid(code, format string, args ...any) *DecodeError {
	return &DecodeError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// DecodeTransfer is the strict decoder of POST /transfers: exactly one JSON
// object with exactly the members from, to and amountKobo, each once and each
// spelled exactly so (encoding/json would also take "FROM"), each a positive
// integer literal no larger than MaxSafeInteger, and nothing after the object.
//
// It accepts a subset of what bank.ParseTransferRequest accepts, so a body
// that passes here is parsed to the same request there; and because it
// refuses duplicate members, no two parsers can read one body two ways.
func DecodeTransfer(body []byte) (bank.TransferRequest, *DecodeError) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	structure := func(detail string) *DecodeError {
		return invalid(bank.CodeInvalidRequest, "The body must be one JSON object with from, to and amountKobo: %s", detail)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return bank.TransferRequest{}, structure("it does not start with {")
	}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bank.TransferRequest{}, structure("it is not valid JSON")
		}
		name, _ := tok.(string)
		switch name {
		case "from", "to", "amountKobo":
		default:
			return bank.TransferRequest{}, structure(fmt.Sprintf("unknown member %q", name))
		}
		if _, dup := raw[name]; dup {
			return bank.TransferRequest{}, structure(fmt.Sprintf("member %q appears twice", name))
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return bank.TransferRequest{}, structure("it is not valid JSON")
		}
		raw[name] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return bank.TransferRequest{}, structure("it is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bank.TransferRequest{}, structure("there is more after the object")
	}

	from, okFrom := positive(raw["from"])
	to, okTo := positive(raw["to"])
	if !okFrom || !okTo {
		return bank.TransferRequest{}, invalid(bank.CodeInvalidAccount, "from and to must be account numbers (whole numbers from 1 to %d)", MaxSafeInteger)
	}
	amount, ok := positive(raw["amountKobo"])
	if !ok {
		return bank.TransferRequest{}, invalid(bank.CodeInvalidAmount, "amountKobo must be a whole number of kobo from 1 to %d", MaxSafeInteger)
	}
	return bank.TransferRequest{From: from, To: to, AmountKobo: amount}, nil
}

// positive reads an integer literal from 1 to MaxSafeInteger; a missing
// member, a string, a float, a negative number or an overflow is refused.
func positive(raw json.RawMessage) (int64, bool) {
	s := string(bytes.TrimSpace(raw))
	if !integerLiteral.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > MaxSafeInteger {
		return 0, false
	}
	return n, true
}
