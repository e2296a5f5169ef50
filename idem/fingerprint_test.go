package idem_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/idem"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"keys sorted", `{"to":2,"from":1,"amountKobo":1000000}`, `{"amountKobo":1000000,"from":1,"to":2}`},
		{"whitespace removed", " {\n\t\"from\" : 1 ,\r\n \"to\":2 }\n", `{"from":1,"to":2}`},
		{"1.0 is 1", `1.0`, `1`},
		{"1e0 is 1", `1e0`, `1`},
		{"1e3 is 1000", `1e3`, `1000`},
		{"-0 is 0", `-0`, `0`},
		{"fraction kept", `10.50`, `10.5`},
		{"small float shortest form", `0.000001`, `1e-06`},
		{"int64 kept exact, not rounded through a float", `9007199254740993`, `9007199254740993`},
		{"nested objects sorted at every level", `{"b":{"z":1,"y":[{"d":1,"c":2}]},"a":null}`, `{"a":null,"b":{"y":[{"c":2,"d":1}],"z":1}}`},
		{"array order kept", `[3,1,2]`, `[3,1,2]`},
		{"literals", `[true,false,null]`, `[true,false,null]`},
		{"HTML characters not escaped", `{"note":"<b>A&B</b>"}`, `{"note":"<b>A&B</b>"}`},
		{"escaped HTML characters unescaped", `{"note":"\u003cb\u003eA\u0026B"}`, `{"note":"<b>A&B"}`},
		{"unicode kept as UTF-8", `{"name":"Adé ₦ 🙂"}`, `{"name":"Adé ₦ 🙂"}`},
		{"unicode escape decoded", `"\u20a6"`, `"₦"`},
		{"control characters escaped", `"a\tb\u0001"`, `"a\tb\u0001"`},
		{"duplicate key: last wins", `{"a":1,"a":2}`, `{"a":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := idem.Canonical([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonical(%q): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}

	for _, bad := range []string{``, `{`, `{"a":}`, `not json`, `{"a":1} {"b":2}`, `1 2`, `'single'`, `1]`, `{"a":1}}`, `[1]]`} {
		t.Run("rejects "+fmt.Sprintf("%q", bad), func(t *testing.T) {
			if got, err := idem.Canonical([]byte(bad)); err == nil {
				t.Errorf("Canonical(%q) = %s, want an error", bad, got)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	fp := func(body string) string { return idem.Fingerprint(idem.Method, idem.Path, []byte(body)) }
	lesson := fp(`{"from": 1, "to": 2, "amountKobo": 1000000}`)
	if len(lesson) != 64 || strings.Trim(lesson, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not hex SHA-256", lesson)
	}

	same := []struct{ name, body string }{
		{"keys reordered", `{"amountKobo": 1000000, "to": 2, "from": 1}`},
		{"no whitespace", `{"from":1,"to":2,"amountKobo":1000000}`},
		{"newlines and tabs", "{\n\t\"from\": 1,\n\t\"to\": 2,\n\t\"amountKobo\": 1000000\n}\n"},
		{"amount as 1000000.0", `{"from":1,"to":2,"amountKobo":1000000.0}`},
		{"amount as 1e6", `{"from":1,"to":2,"amountKobo":1e6}`},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			if got := fp(tt.body); got != lesson {
				t.Errorf("Fingerprint(%s) differs from the lesson's request", tt.body)
			}
		})
	}

	differ := []struct{ name, body string }{
		{"other amount 5000000", `{"from":1,"to":2,"amountKobo":5000000}`},
		{"from and to swapped", `{"from":2,"to":1,"amountKobo":1000000}`},
		{"extra field", `{"from":1,"to":2,"amountKobo":1000000,"note":"x"}`},
		{"amount as a string", `{"from":1,"to":2,"amountKobo":"1000000"}`},
	}
	for _, tt := range differ {
		t.Run("differs/"+tt.name, func(t *testing.T) {
			if got := fp(tt.body); got == lesson {
				t.Errorf("Fingerprint(%s) equals the lesson's request", tt.body)
			}
		})
	}

	body := []byte(`{"from":1,"to":2,"amountKobo":1000000}`)
	t.Run("method is part of the hash", func(t *testing.T) {
		if idem.Fingerprint("PUT", idem.Path, body) == lesson {
			t.Error("PUT and POST fingerprint alike")
		}
	})
	t.Run("path is part of the hash", func(t *testing.T) {
		if idem.Fingerprint(idem.Method, "/payments", body) == lesson {
			t.Error("/payments and /transfers fingerprint alike")
		}
	})
	t.Run("stable across calls", func(t *testing.T) {
		for range 3 {
			if fp(`{"note":"<&>","name":"Adé"}`) != fp(`{"name":"Ad\u00e9","note":"\u003c\u0026\u003e"}`) {
				t.Fatal("HTML or unicode escapes change the fingerprint")
			}
		}
	})
	t.Run("not JSON is hashed raw without panicking", func(t *testing.T) {
		raw := []byte("from=1&to=2&amountKobo=1000000")
		a, b := idem.Fingerprint(idem.Method, idem.Path, raw), idem.Fingerprint(idem.Method, idem.Path, raw)
		if a != b || len(a) != 64 {
			t.Errorf("raw fingerprints %q, %q", a, b)
		}
		if a == idem.Fingerprint(idem.Method, idem.Path, []byte("from=1&to=2&amountKobo=5000000")) {
			t.Error("two different raw bodies fingerprint alike")
		}
		// Raw bodies are not normalised: whitespace matters for them.
		if a == idem.Fingerprint(idem.Method, idem.Path, append(raw, ' ')) {
			t.Error("raw body with a trailing space fingerprints alike; raw bodies should be hashed as they are")
		}
		if idem.Fingerprint(idem.Method, idem.Path, nil) == "" {
			t.Error("empty body gave an empty fingerprint")
		}
	})
}

func TestValidKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"empty", "", false},
		{"15 characters", strings.Repeat("a", 15), false},
		{"16 characters", strings.Repeat("a", 16), true},
		{"64 characters", strings.Repeat("Z", 64), true},
		{"65 characters", strings.Repeat("9", 65), false},
		{"uuid with hyphens", "5f0c2d4e-8a1b-4c3d-9e7f-1a2b3c4d5e6f", true},
		{"lesson's key", "tap-2026-09-24-0001", true},
		{"underscores", "double_tap_0000000001", true},
		{"only hyphens", strings.Repeat("-", 16), true},
		{"only underscores", strings.Repeat("_", 16), true},
		{"contains a space", "tap 2026-09-24-0001", false},
		{"contains a dot", "tap.2026-09-24-0001", false},
		{"contains a slash", "tap/2026-09-24-0001", false},
		{"non-ASCII letter", "tapé-2026-09-24-0001", false},
		{"naira sign", "₦₦₦₦₦₦₦₦₦₦₦₦₦₦₦₦", false},
		{"trailing newline", strings.Repeat("a", 16) + "\n", false},
		{"leading space", " " + strings.Repeat("a", 16), false},
		{"NUL byte", strings.Repeat("a", 16) + "\x00", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := idem.ValidKey(tt.key); got != tt.want {
				t.Errorf("ValidKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

// respell writes the JSON value v (decoded with UseNumber) with its object
// keys in reverse order, HTML characters escaped and extra whitespace: a
// different spelling of the same document.
func respell(buf *bytes.Buffer, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Sort(sort.Reverse(sort.StringSlice(keys)))
		buf.WriteString("{ ")
		for i, k := range keys {
			if i > 0 {
				buf.WriteString(" ,\n")
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteString(" : ")
			respell(buf, x[k])
		}
		buf.WriteString(" }")
	case []any:
		buf.WriteString("[ ")
		for i, e := range x {
			if i > 0 {
				buf.WriteString(" , ")
			}
			respell(buf, e)
		}
		buf.WriteString(" ]")
	default:
		b, _ := json.Marshal(x) // json.Number, string, bool, nil
		buf.Write(b)
	}
}

func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{
		`{"from": 1, "to": 2, "amountKobo": 1000000}`,
		`{"amountKobo":1e6,"to":2,"from":1}`,
		`{"b":{"z":1,"y":[{"d":1,"c":2}]},"a":null}`,
		`{"note":"<b>A&B</b>","name":"Adé ₦ 🙂"}`,
		`[1.0, -0, 1e-7, 12345678901234567890, 9007199254740993]`,
		`"\u2028\ud800"`,
		`{"a":1,"a":2}`,
		`not json`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		once, err := idem.Canonical(doc)
		if err != nil {
			return // only documents that parse have a canonical form
		}
		twice, err := idem.Canonical(once)
		if err != nil {
			t.Fatalf("Canonical(%q) = %q, which does not parse: %v", doc, once, err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("not idempotent:\n in    %q\n once  %q\n twice %q", doc, once, twice)
		}

		dec := json.NewDecoder(bytes.NewReader(once))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("canonical form %q does not decode: %v", once, err)
		}
		var buf bytes.Buffer
		respell(&buf, v)
		again, err := idem.Canonical(buf.Bytes())
		if err != nil {
			t.Fatalf("respelled %q does not parse: %v", buf.Bytes(), err)
		}
		if !bytes.Equal(again, once) {
			t.Fatalf("reordering keys changed the canonical form:\n canonical %q\n respelled %q\n gave      %q", once, buf.Bytes(), again)
		}
		if idem.Fingerprint(idem.Method, idem.Path, buf.Bytes()) != idem.Fingerprint(idem.Method, idem.Path, doc) {
			t.Fatalf("respelling %q changed its fingerprint", doc)
		}
	})
}

// TestCanonicalStringsAsEncodingJSON: Canonical writes every string (plain
// ASCII, which it writes itself, and the rest, which it leaves to
// encoding/json) exactly as encoding/json does with HTML escaping off.
func TestCanonicalStringsAsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "plain note 1", "rent <flat 3> & co", `quote " here`, `back\slash`,
		"tab\there", "new\nline", "\x7f del", "Ọlá ₦", "\u2028 separator", "\x00", "~ tilde"} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]string{"note": s}); err != nil {
			t.Fatal(err)
		}
		doc, _ := json.Marshal(map[string]string{"note": s})
		got, err := idem.Canonical(doc)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(got)+"\n" != want.String() {
			t.Errorf("%q: Canonical wrote %s, encoding/json %s", s, got, want.String())
		}
	}
}
