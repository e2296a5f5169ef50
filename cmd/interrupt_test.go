package cmd_test

import (
	"context"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
	"github.com/jackc/pgx/v5"
)

// interruptMidRun runs scenario --all and cancels it (Ctrl-C) once the first
// story has started, and returns the exit code and stderr.
func interruptMidRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r := startCommand(t, nil, "━━", "", append([]string{"scenario", "--all"}, args...)...)
	r.interrupt()
	return r.exit(t), r.errOut.String()
}

// Interrupted on a server it started, bank-sim says the server is stopped.
func TestInterruptOnTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	code, stderr := interruptMidRun(t)
	if code != cmd.ExitInterrupted {
		t.Fatalf("exit %d, want %d; stderr: %s", code, cmd.ExitInterrupted, stderr)
	}
	if !strings.Contains(stderr, "bank-sim: interrupted; PostgreSQL stopped, nothing left running") {
		t.Errorf("stderr: %s", stderr)
	}
}

// Interrupted on a server it does not own, bank-sim drops what this run made,
// does not claim to have stopped the server, and the server still runs.
func TestInterruptOnAnExternalServer(t *testing.T) {
	t.Parallel()
	// A warm cluster slot of the shared cache, this test's alone while it
	// runs (a fresh cache directory cost an initdb and a first template:
	// most of the test's 6 s). The slot may hold what earlier runs kept,
	// so what the interrupted run left is what is there after it and was
	// not before.
	ctx := context.Background()
	ext, err := postgres.Start(ctx, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	conn, err := pgx.Connect(ctx, ext.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	bankSimDatabases := func() map[string]bool {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'bank_sim_%'")
		if err != nil {
			t.Fatalf("the server no longer runs: %v", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, n := range names {
			out[n] = true
		}
		return out
	}
	before := bankSimDatabases()

	code, stderr := interruptMidRun(t, "--database-url", ext.AdminURL())
	if code != cmd.ExitInterrupted {
		t.Fatalf("exit %d, want %d; stderr: %s", code, cmd.ExitInterrupted, stderr)
	}
	if strings.Contains(stderr, "PostgreSQL stopped") || !strings.Contains(stderr,
		"bank-sim: interrupted; this run's databases are dropped; the PostgreSQL server at --database-url / DATABASE_URL is not bank-sim's and keeps running") {
		t.Errorf("stderr: %s", stderr)
	}
	var left []string
	for n := range bankSimDatabases() {
		if !before[n] {
			left = append(left, n)
		}
	}
	if len(left) > 0 {
		t.Errorf("the interrupted run left %v", left)
	}
}
