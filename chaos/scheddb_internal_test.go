package chaos

import (
	"testing"

	"github.com/banksim/bank-sim/outbox"
)

// Which statements a deterministic run lets wait for a lock inside
// PostgreSQL (a claim that reads its rows and writes them in one
// statement), and which it sends behind a savepoint (anything that may
// wait for a row lock, the claim without SKIP LOCKED included).
func TestStatementsThatWaitForLocks(t *testing.T) {
	t.Parallel()
	claim := func(flaws outbox.Flaws) string { return (&outbox.Dispatcher{Flaws: flaws}).ClaimSQL() }
	for _, tc := range []struct {
		name, sql         string
		waitsInPG, behind bool
	}{
		{"the claim", claim(outbox.Flaws{}), true, true},
		{"the claim without SKIP LOCKED", claim(outbox.Flaws{NoSkipLocked: true}), true, true},
		{"the key's completion", "WITH completed AS (UPDATE idempotency_keys SET status = 'completed' WHERE key = $1 RETURNING true) SELECT 1", false, true},
		{"a debit", "UPDATE accounts SET balance_kobo = balance_kobo - $1 WHERE id = $2", false, true},
		{"a read", "SELECT balance_kobo FROM accounts WHERE id = $1", false, false},
		{"a read in a CTE", "WITH b AS (SELECT balance_kobo FROM accounts) SELECT sum(balance_kobo) FROM b", false, false},
	} {
		if got := waitsInPG(tc.sql); got != tc.waitsInPG {
			t.Errorf("%s: waitsInPG %v, want %v", tc.name, got, tc.waitsInPG)
		}
		if got := mayWait(tc.sql); got != tc.behind {
			t.Errorf("%s: behind a savepoint %v, want %v", tc.name, got, tc.behind)
		}
	}
}
