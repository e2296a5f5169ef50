// Package idem makes the transfer endpoint idempotent: a PostgreSQL key
// store (claim, replay, reject a mismatch, take over an expired lock, fence a
// late server, clean up) and the handler that wraps bank.Transfer with it.
package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
)

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// ValidKey reports whether key is an acceptable Idempotency-Key: 16 to 64
// letters, digits, '-' or '_'. Long enough that a random key does not collide,
// short and plain enough to store and log safely.
func ValidKey(key string) bool { return keyPattern.MatchString(key) }

// Canonical rewrites a JSON document so that two spellings of the same value
// give the same bytes: object keys sorted, no insignificant whitespace,
// numbers in their shortest form (1.0 and 1e0 are both 1).
func Canonical(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	// More() misses a stray '}' or ']'; only io.EOF proves the document ended.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not JSON: trailing data after the document")
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case string:
		writeString(buf, x)
	case json.Number:
		buf.WriteString(canonicalNumber(x))
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON value %T", v)
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	// A string of printable ASCII with no quote or backslash is written as
	// it is by encoding/json (HTML escaping off): skip the encoder, which
	// costs an allocation or two per string of every fingerprint.
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\'
	}
	if plain {
		buf.WriteByte('"')
		buf.WriteString(s)
		buf.WriteByte('"')
		return
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

// canonicalNumber keeps integers exact (an int64 amount must not pass through
// a float64) and gives every other number its shortest float form.
func canonicalNumber(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return string(n)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Fingerprint is the SHA-256 of the method, the path and the canonical body:
// the identity of a request, so that a key reused for another request can be
// told apart from a retry. A body that is not JSON is hashed as it is.
func Fingerprint(method, path string, body []byte) string {
	canon, err := Canonical(body)
	if err != nil {
		canon = body
	}
	h := sha256.New()
	h.Write([]byte(method + " " + path + " "))
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))
}
