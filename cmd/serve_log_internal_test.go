package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/banksim/bank-sim/api"
	"github.com/banksim/bank-sim/idem"
)

// serve's request log keeps its columns for every answer, the longest
// error code included: the replay column and the duration start at the
// same place on every line.
func TestRequestLogColumnsHoldForTheLongestCode(t *testing.T) {
	var out bytes.Buffer
	app := &App{Env: &Env{Stdout: &out, Getenv: func(string) string { return "" }, Now: time.Now}}
	log := requestLog(app, nil)
	for _, a := range []api.Access{
		{Method: "POST", Path: "/transfers", User: 1, Key: "tap-0000000000000001", Status: 201, TransferID: 7, Replayed: true, Duration: 3 * time.Millisecond},
		{Method: "POST", Path: "/transfers", User: 2, Key: "tap-0000000000000002", Status: 409, Code: idem.CodeInProgress, Duration: 4 * time.Millisecond},
		{Method: "POST", Path: "/transfers", User: 1, Status: 400, Code: idem.CodeKeyRequired, Duration: 5 * time.Millisecond},
		{Method: "GET", Path: "/transfers?key=x", User: 1, Key: "tap-0000000000000003", Status: 404, Code: api.CodeUnknownKey, Duration: 6 * time.Millisecond},
		{Method: "POST", Path: "/transfers", User: 3, Key: "tap-0000000000000004", Status: 415, Code: api.CodeUnsupportedMedia, Duration: 7 * time.Millisecond},
	} {
		log(a)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 5:\n%s", len(lines), out.String())
	}
	// In columns, not bytes: a cut path ends in "…".
	at := func(l string) int { return utf8.RuneCountInString(l[:strings.Index(l, " ms")]) }
	col := at(lines[0])
	for _, l := range lines {
		if got := at(l); got != col {
			t.Errorf("the duration column moved (at %d, not %d):\n%s", got, col, out.String())
			break
		}
	}
}
