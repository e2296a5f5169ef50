package probe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/banksim/bank-sim/probe/judge"
)

// Contract is how a target spells the lesson's transfer API: where it lives,
// what its headers and fields are called. The zero value is not usable;
// LessonContract gives the lesson's names, and flags change one at a time.
type Contract struct {
	// Path of the transfer endpoint ("/transfers").
	Path string `json:"path"`
	// KeyHeader carries the idempotency key ("Idempotency-Key").
	KeyHeader string `json:"keyHeader"`
	// AuthHeader carries the credentials ("Authorization"), as
	// AuthScheme + " " + token; only the token when AuthScheme is empty.
	AuthHeader string `json:"authHeader"`
	AuthScheme string `json:"authScheme"`
	// FromField, ToField and AmountField name the request body's members.
	FromField   string `json:"fromField"`
	ToField     string `json:"toField"`
	AmountField string `json:"amountField"`
	// IDField and BalanceField name the answer's transfer id and the
	// sender's balance after it (a dotted path for nested members).
	// BalanceField is optional: without it the probe sees no balances in
	// answers.
	IDField      string `json:"idField"`
	BalanceField string `json:"balanceField,omitempty"`
	// ReplayedHeader marks a replayed answer ("Idempotent-Replayed");
	// optional, only ever used as evidence.
	ReplayedHeader string `json:"replayedHeader,omitempty"`
	// Lookup is the path, with {key}, of a GET that answers what became of
	// a key ("/transfers?key={key}"); optional.
	Lookup string `json:"lookup,omitempty"`
	// ExactReplays is the target's promise that a replay is its first
	// answer byte for byte, as bank-sim serve's is (issue 7): then a replay
	// that differs fails the check that saw it. Without the promise the
	// difference is only warned about: the lesson's own server stores the
	// answer as jsonb, which reorders its members, and calls that harmless
	// to a JSON client; it matters to one that verifies a signed body or
	// compares bytes.
	ExactReplays bool `json:"exactReplays,omitempty"`
	// KeyRefusals are the target's own refusals of a reused key
	// (--key-refusal), beyond the lesson's 422 with a code naming the key.
	KeyRefusals []judge.Rule `json:"keyRefusals,omitempty"`
}

// Judge is how answers are judged through c: the lesson's defaults and the
// target's own key refusals. probe and chaos --target both judge by it.
func (c Contract) Judge() judge.Judge { return judge.Judge{KeyRefusals: c.KeyRefusals} }

// LessonContract is the contract of the lesson's server.js and of bank-sim
// serve.
func LessonContract() Contract {
	return Contract{
		Path:           "/transfers",
		KeyHeader:      "Idempotency-Key",
		AuthHeader:     "Authorization",
		AuthScheme:     "Bearer",
		FromField:      "from",
		ToField:        "to",
		AmountField:    "amountKobo",
		IDField:        "transferId",
		BalanceField:   "balanceKobo",
		ReplayedHeader: "Idempotent-Replayed",
		Lookup:         "/transfers?key={key}",
	}
}

// Validate says what is wrong with c, if anything.
func (c Contract) Validate() error {
	if !strings.HasPrefix(c.Path, "/") {
		return fmt.Errorf("--path %q must start with /", c.Path)
	}
	for name, v := range map[string]string{"--key-header": c.KeyHeader, "--auth-header": c.AuthHeader} {
		if v == "" || strings.ContainsAny(v, " :\r\n") {
			return fmt.Errorf("%s %q is not a header name", name, v)
		}
	}
	fields := map[string]string{"--from-field": c.FromField, "--to-field": c.ToField, "--amount-field": c.AmountField}
	seen := map[string]string{}
	for _, name := range []string{"--from-field", "--to-field", "--amount-field"} {
		v := fields[name]
		if v == "" {
			return fmt.Errorf("%s must not be empty", name)
		}
		if other, dup := seen[v]; dup {
			return fmt.Errorf("%s and %s are both %q", other, name, v)
		}
		seen[v] = name
	}
	if c.IDField == "" {
		return fmt.Errorf("--id-field must not be empty: the transfer id is how the probe tells one transfer from two")
	}
	if c.Lookup != "" && (!strings.HasPrefix(c.Lookup, "/") || !strings.Contains(c.Lookup, "{key}")) {
		return fmt.Errorf("--lookup %q must be a path with {key} in it, like /transfers?key={key} (or none)", c.Lookup)
	}
	return nil
}

// User is one of the target's users as the probe knows it: a name ("ada"),
// the credentials to act as them, and their account.
type User struct {
	Name    string `json:"name"`
	Token   string `json:"-"`
	Account ID     `json:"account"`
}

// ID is an account number or name as the target spells it: a JSON number
// when it looks like one, a JSON string otherwise.
type ID string

// JSON is the id as it goes into a request body.
func (id ID) JSON() json.RawMessage {
	if _, err := strconv.ParseInt(string(id), 10, 64); err == nil {
		return json.RawMessage(id)
	}
	b, _ := json.Marshal(string(id))
	return b
}

// Transfer is one transfer the probe asks for.
type Transfer struct {
	From   ID    `json:"from"`
	To     ID    `json:"to"`
	Amount int64 `json:"amount"` // in the currency's smallest unit (kobo)
}

// body is the request body in the contract's names; reordered writes the
// same members in the opposite order (the same request, spelled differently).
func (c Contract) body(t Transfer, reordered bool) []byte {
	members := []struct {
		name  string
		value json.RawMessage
	}{
		{c.FromField, t.From.JSON()},
		{c.ToField, t.To.JSON()},
		{c.AmountField, json.RawMessage(strconv.FormatInt(t.Amount, 10))},
	}
	if reordered {
		members[0], members[2] = members[2], members[0]
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(m.name)
		b.Write(name)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// NewRequest is the transfer t, asked for by u with key (none when ""), as an
// HTTP request to the target at base ("http://127.0.0.1:8080"): what a
// client of another harness (chaos --target) sends, in the target's names.
func (c Contract) NewRequest(base string, u User, key string, t Transfer) (*http.Request, error) {
	return c.newRequest(base, u, key, t, false)
}

// NewReorderedRequest is NewRequest with the body's members written in
// another order: the same transfer in other bytes, as a client whose JSON
// library orders members otherwise sends it. A key bound to the parsed
// request takes it for the same request.
func (c Contract) NewReorderedRequest(base string, u User, key string, t Transfer) (*http.Request, error) {
	return c.newRequest(base, u, key, t, true)
}

func (c Contract) newRequest(base string, u User, key string, t Transfer, reordered bool) (*http.Request, error) {
	req, err := http.NewRequest("POST", strings.TrimRight(base, "/")+c.Path, bytes.NewReader(c.body(t, reordered)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(c.AuthHeader, c.authValue(u.Token))
	if key != "" {
		req.Header.Set(c.KeyHeader, key)
	}
	return req, nil
}

// NewLookup is the GET of Lookup that asks the target at base what became
// of key, as u; an error when the contract has no lookup.
func (c Contract) NewLookup(base string, u User, key string) (*http.Request, error) {
	if c.Lookup == "" {
		return nil, fmt.Errorf("the contract has no lookup of a key")
	}
	req, err := http.NewRequest("GET", strings.TrimRight(base, "/")+strings.ReplaceAll(c.Lookup, "{key}", url.QueryEscape(key)), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(c.AuthHeader, c.authValue(u.Token))
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// Read is an HTTP answer from the target, read through the contract: the
// transfer id, the balance, the replay mark, a refusal's code.
func (c Contract) Read(status int, h http.Header, body []byte) *Answer {
	return c.read(status, h, body)
}

// authValue is the credentials header's value for token.
func (c Contract) authValue(token string) string {
	if c.AuthScheme == "" {
		return token
	}
	return c.AuthScheme + " " + token
}

// Answer is what the target said to one request, read through the contract.
type Answer struct {
	Status int         `json:"status"`
	Header http.Header `json:"-"`
	Body   []byte      `json:"-"`
	// Text is the body as text, for tools reading the report.
	Text string `json:"body,omitempty"`
	// TransferID is the id member's JSON text ("" when absent).
	TransferID string `json:"transferId,omitempty"`
	// Balance is the sender's balance after the transfer, when the answer
	// gives one.
	Balance *int64 `json:"balance,omitempty"`
	// Replayed is the replay header's verdict, when the target sends one.
	Replayed bool `json:"replayed,omitempty"`
	// Code is a refusal's machine-readable code, from "code", "error" or
	// "error.code".
	Code string `json:"code,omitempty"`
	// RetryAfter is the Retry-After header's seconds, when sent.
	RetryAfter int `json:"-"`
	// Class is what the answer means to its client (package judge).
	Class judge.Class `json:"class,omitempty"`
}

// OK reports a 2xx.
func (a *Answer) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Receipt reports a 2xx that names its transfer.
func (a *Answer) Receipt() bool { return a.OK() && a.TransferID != "" }

// Settled reports an answer a client may act on for good: anything but
// 409 (in progress), 429 (slow down) and 5xx (try again).
func (a *Answer) Settled() bool { return a.Status != 409 && a.Status != 429 && a.Status < 500 }

// String is the answer as evidence prints it: "201 transferId 7, balanceKobo
// 4990000, replayed" or "422 idempotency_key_reused".
func (a *Answer) String() string {
	parts := []string{strconv.Itoa(a.Status)}
	if a.TransferID != "" {
		parts = append(parts, "transferId "+a.TransferID)
	}
	if a.Balance != nil {
		parts = append(parts, "balance "+Kobo(*a.Balance))
	}
	if a.Code != "" {
		parts = append(parts, a.Code)
	}
	if a.Replayed {
		parts = append(parts, "replayed")
	}
	s := parts[0]
	if len(parts) > 1 {
		s += " " + strings.Join(parts[1:], ", ")
	}
	return s
}

// read parses an HTTP answer through the contract.
func (c Contract) read(status int, h http.Header, body []byte) *Answer {
	a := &Answer{Status: status, Header: h, Body: body, Text: string(body)}
	if c.ReplayedHeader != "" {
		a.Replayed = strings.EqualFold(strings.TrimSpace(h.Get(c.ReplayedHeader)), "true")
	}
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s >= 0 {
		a.RetryAfter = s
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		a.Class = c.Judge().Class(status, "", a.Replayed)
		return a
	}
	if v, ok := lookup(doc, c.IDField); ok && v != nil {
		switch v := v.(type) {
		case json.Number:
			a.TransferID = v.String()
		case string:
			if v != "" {
				b, _ := json.Marshal(v)
				a.TransferID = string(b)
			}
		}
	}
	if c.BalanceField != "" {
		if v, ok := lookup(doc, c.BalanceField); ok {
			if n, ok := integer(v); ok {
				a.Balance = &n
			}
		}
	}
	for _, f := range []string{"code", "error", "error.code"} {
		if v, ok := lookup(doc, f); ok {
			if s, ok := v.(string); ok && s != "" {
				a.Code = s
				break
			}
		}
	}
	a.Class = c.Judge().Class(status, a.Code, a.Replayed)
	return a
}

// lookup follows a dotted path ("data.id") into a decoded JSON document.
func lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// integer reads a whole number from a JSON number or a numeric string;
// money never passes through a float.
func integer(v any) (int64, bool) {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = v
	default:
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, err == nil
}

// Kobo formats an amount of the smallest unit as naira: 1000050 → ₦10,000.50.
func Kobo(k int64) string {
	sign := ""
	if k < 0 {
		sign, k = "-", -k
	}
	whole := strconv.FormatInt(k/100, 10)
	var b strings.Builder
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if cents := k % 100; cents != 0 {
		return fmt.Sprintf("%s₦%s.%02d", sign, b.String(), cents)
	}
	return sign + "₦" + b.String()
}

// sortedNames returns m's keys, sorted.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
