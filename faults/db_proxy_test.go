package faults_test

import (
	"testing"

	"github.com/banksim/bank-sim/faults"
)

// The proxy fails a COMMIT, and only a COMMIT, as drivers send it.
func TestIsCommitSQL(t *testing.T) {
	for q, want := range map[string]bool{
		"COMMIT":                          true,
		"commit;":                         true,
		"  End Transaction ":              true,
		"COMMIT WORK":                     true,
		"UPDATE accounts SET x=1; COMMIT": true,
		"ROLLBACK":                        false,
		"BEGIN":                           false,
		"COMMIT PREPARED 'x'":             false,
		"SELECT 'commit'":                 false,
		"INSERT INTO t VALUES ('end')":    false,
		"":                                false,
	} {
		if got := faults.IsCommitSQL(q); got != want {
			t.Errorf("IsCommitSQL(%q) = %v, want %v", q, got, want)
		}
	}
}
