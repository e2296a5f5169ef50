package htmlreport_test

import (
	"os"
	"testing"

	"github.com/banksim/bank-sim/internal/browsertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	browsertest.Close()
	os.Exit(code)
}
