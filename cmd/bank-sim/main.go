// Command bank-sim is a bank simulator and failure-injection harness: it
// shows, on a real PostgreSQL, why money-moving APIs need transactions and
// idempotency keys. See the README, or run bank-sim --help.
package main

import (
	"os"

	"github.com/banksim/bank-sim/cmd"
)

func main() { os.Exit(cmd.Main()) }
