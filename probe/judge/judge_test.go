package judge_test

import (
	"strings"
	"testing"

	"github.com/banksim/bank-sim/probe/judge"
)

func TestClass(t *testing.T) {
	j := judge.Judge{KeyRefusals: []judge.Rule{{Status: 417}, {Status: 422, Code: "IDEMPOTENCY_FINGERPRINT_MISMATCH"}}}
	cases := []struct {
		j        judge.Judge
		status   int
		code     string
		replayed bool
		want     judge.Class
	}{
		{judge.Judge{}, 201, "", false, judge.Success},
		{judge.Judge{}, 201, "", true, judge.Replay},
		{judge.Judge{}, 422, "idempotency_key_reused", false, judge.KeyRefusal},
		{judge.Judge{}, 422, "insufficient_funds", false, judge.BusinessRefusal},
		{judge.Judge{}, 422, "IDEMPOTENCY_FINGERPRINT_MISMATCH", false, judge.BusinessRefusal},
		{judge.Judge{}, 417, "", false, judge.Other},
		{judge.Judge{}, 409, "", false, judge.InProgress},
		{judge.Judge{}, 503, "", false, judge.ServerError},
		{j, 417, "whatever", false, judge.KeyRefusal},
		{j, 422, "idempotency_fingerprint_mismatch", false, judge.KeyRefusal},
		{j, 422, "insufficient_funds", false, judge.BusinessRefusal},
	}
	for _, tc := range cases {
		if got := tc.j.Class(tc.status, tc.code, tc.replayed); got != tc.want {
			t.Errorf("%v: %d %q replayed=%v is %q, want %q", tc.j.KeyRefusals, tc.status, tc.code, tc.replayed, got, tc.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	for in, want := range map[string]string{"417": "417", " 422:CODE ": "422:CODE"} {
		r, err := judge.ParseRule(in)
		if err != nil || r.String() != want {
			t.Errorf("ParseRule(%q) = %v, %v; want %s", in, r, err, want)
		}
	}
	for _, in := range []string{"", "abc", "200", "500:X", "422:two words"} {
		if _, err := judge.ParseRule(in); err == nil {
			t.Errorf("ParseRule(%q) accepted", in)
		}
	}
}

func TestCause(t *testing.T) {
	long := strings.Repeat("é", 300)
	cases := map[string]struct {
		status int
		body   string
		want   string
	}{
		"message":        {500, `{"message":"deadlock detected"}`, "500 deadlock detected"},
		"code":           {422, `{"error":"insufficient_funds"}`, "422 insufficient_funds"},
		"both, nested":   {422, `{"error":{"code":"X","message":"the body differs"}}`, "422 X: the body differs"},
		"text":           {502, "Bad Gateway\r\n", "502 Bad Gateway"},
		"empty":          {500, "", "500"},
		"control":        {500, "{\"message\":\"a\\u001b[2Jb\\u0000\"}", `500 a\x1b[2Jb\x00`},
		"invalid utf-8":  {500, "oops\xff", `500 oops\xff`},
		"bounded":        {500, `{"message":"` + long + `"}`, "500 " + strings.Repeat("é", judge.MaxCause-1) + "…"},
		"html page, one": {500, "<html>\n  <body>x</body>\n</html>", "500 <html> <body>x</body> </html>"},
	}
	for name, tc := range cases {
		if got := judge.Cause(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: Cause = %q, want %q", name, got, tc.want)
		}
	}
}
