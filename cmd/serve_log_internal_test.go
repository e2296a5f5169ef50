package cmd

import (
	"bytes"
	"errors"
	"fmt"
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

func TestQuietRepeatsLogsAnErrorOnceUntilItChangesOrTimePasses(t *testing.T) {
	var lines []string
	logf := func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }
	clock := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	onErr := quietRepeats("outbox", logf, func() time.Time { return clock }, 10*time.Second)
	down := errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")
	for i := 0; i < 50; i++ { // 5 s of failures, one every 100 ms
		onErr(down)
		clock = clock.Add(100 * time.Millisecond)
	}
	if len(lines) != 1 || lines[0] != "outbox: "+down.Error() {
		t.Fatalf("50 identical errors in 5 s logged %d lines %q; want the first one only", len(lines), lines)
	}
	for i := 0; i < 60; i++ { // 6 s more: past 10 s since the first line
		onErr(down)
		clock = clock.Add(100 * time.Millisecond)
	}
	if len(lines) != 2 || !strings.Contains(lines[1], "(again, 100 times in 10s)") {
		t.Fatalf("after 11 s of the same error: %q; want one reminder with its count", lines)
	}
	onErr(errors.New(`outbox row 7 has unknown kind "fax"`))
	if len(lines) != 3 || !strings.Contains(lines[2], "fax") {
		t.Fatalf("a new error: %q; want it logged at once", lines)
	}
}
