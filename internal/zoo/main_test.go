package zoo_test

import (
	"os"
	"testing"

	"github.com/banksim/bank-sim/postgres/pgtest"
)

// TestMain starts the one PostgreSQL the database members' tests share.
func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
