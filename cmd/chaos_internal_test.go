package cmd

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5/pgconn"
)

// Only a database that could not be reached is exit 3; a run that failed for
// any other reason is exit 1, with its message.
func TestRunFailedExitsThreeOnlyForAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		code int
	}{
		{"PostgreSQL unavailable", fmt.Errorf("new bank: %w: connection refused", postgres.ErrUnavailable), ExitDatabase},
		{"a connection that broke", fmt.Errorf("audit: %w", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), ExitDatabase},
		{"an SQL error", fmt.Errorf("empty the bank: %w", &pgconn.PgError{Code: "42P01", Message: `relation "accounts" does not exist`}), ExitFailed},
		{"a harness that waited in vain", errors.New("waited 1m0s for requests still on their way to the servers; they never finished"), ExitFailed},
	}
	for _, tt := range cases {
		var ee *ExitError
		if !errors.As(runFailed(tt.err), &ee) || ee.Code != tt.code {
			t.Errorf("%s: exit %v, want %d", tt.name, ee, tt.code)
		}
	}
}

// A run too short to give every fault and defence its chance says so in
// its header, before it runs, with the --intents that can; one long enough
// says nothing.
func TestShortRunHeaderNamesTheIntentsThatCover(t *testing.T) {
	short := describeConfig(chaos.Config{Seed: 1, Intents: 20}.WithDefaults())
	if !strings.Contains(short, "coverage: 20 intents are too few") || !strings.Contains(short, "--intents 64 or more can") {
		t.Errorf("20 intents: header\n%s\nwant the coverage line with --intents 64", short)
	}
	if long := describeConfig(chaos.Config{Seed: 1, Intents: 200}.WithDefaults()); strings.Contains(long, "coverage:") {
		t.Errorf("200 intents: header\n%s\nwant no coverage line", long)
	}
}
