package judge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxCause bounds a cause's text in runes: a summary names causes, it does
// not reprint a stack trace or an HTML error page.
const MaxCause = 100

// Cause is an answer in a few words, for grouping like answers in a
// summary: the status and what the body says of why ("500 deadlock
// detected", "422 insufficient_funds"). From a JSON body, its code
// ("code", "error", "error.code") and message ("message", "error.message",
// "detail", "title"), one or both; otherwise the body's text. Control
// characters are escaped and the text bounded (MaxCause), so that a body
// cannot break the terminal or the report it is printed in.
func Cause(status int, body []byte) string {
	code, msg := codeAndMessage(body)
	what := code
	switch {
	case code != "" && msg != "" && !strings.EqualFold(code, msg):
		what = code + ": " + msg
	case code == "":
		what = msg
	}
	if what == "" && !json.Valid(body) {
		what = string(bytes.TrimSpace(body))
	}
	what = bound(clean(what))
	if what == "" {
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status) + " " + what
}

// codeAndMessage reads a JSON body's error code and message, if it has any.
func codeAndMessage(body []byte) (code, msg string) {
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return "", ""
	}
	str := func(path string) string {
		var cur any = doc
		for _, part := range strings.Split(path, ".") {
			obj, ok := cur.(map[string]any)
			if !ok {
				return ""
			}
			cur = obj[part]
		}
		s, _ := cur.(string)
		return strings.TrimSpace(s)
	}
	for _, p := range []string{"code", "error", "error.code"} {
		if code = str(p); code != "" {
			break
		}
	}
	for _, p := range []string{"message", "error.message", "detail", "title"} {
		if msg = str(p); msg != "" {
			break
		}
	}
	return code, msg
}

// clean escapes control characters and invalid UTF-8, and folds runs of
// white space into one space.
func clean(s string) string {
	var b strings.Builder
	space := false
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || r == '\n' || r == '\t' || r == '\r':
			if !space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = true
			continue
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		space = false
	}
	return strings.TrimSpace(b.String())
}

// bound cuts s to MaxCause runes, marking the cut.
func bound(s string) string {
	if utf8.RuneCountInString(s) <= MaxCause {
		return s
	}
	r := []rune(s)
	return string(r[:MaxCause-1]) + "…"
}
