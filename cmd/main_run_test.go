package cmd_test

import (
	"os"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/internal/browsertest"
	"github.com/banksim/bank-sim/postgres"
	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the PostgreSQL supervisor and as the
	// bank-sim command that the tests run (step's tests exec it; the golden
	// scripts are cmd/scripts').
	postgres.MaybeSupervise()
	os.Exit(testscript.RunMain(closeBrowser{m}, map[string]func() int{"bank-sim": cmd.Main}))
}

// closeBrowser stops the tests' browser and their shared PostgreSQL after
// they ran: RunMain exits the process itself, so nothing after it in
// TestMain would run.
type closeBrowser struct{ m *testing.M }

func (c closeBrowser) Run() int {
	code := c.m.Run()
	browsertest.Close()
	closeSharedServer()
	return code
}
