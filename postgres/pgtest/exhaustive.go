package pgtest

import (
	"os"
	"testing"
)

// ExhaustiveEnv is the environment variable that opts in to the exhaustive
// tests: every mistake shrunk to a recipe, every mistake against every
// check, long and repeated chaos runs. `go test ./...` leaves them out, so
// that it fits in three minutes on two cores; .ci/run sets it and runs them
// too.
const ExhaustiveEnv = "BANK_SIM_EXHAUSTIVE"

// Exhaustive skips t unless BANK_SIM_EXHAUSTIVE=1, saying how to run it: a
// skip that shows in go test -v, where a build tag would hide the test.
func Exhaustive(t testing.TB) {
	t.Helper()
	if !IsExhaustive() {
		t.Skip("exhaustive: set " + ExhaustiveEnv + "=1 to run")
	}
}

// IsExhaustive reports whether the exhaustive tests were asked for: a test
// that runs a short form by default and its long form then.
func IsExhaustive() bool { return os.Getenv(ExhaustiveEnv) == "1" }
