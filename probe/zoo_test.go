package probe_test

import (
	"testing"

	"github.com/banksim/bank-sim/internal/zoo"
)

// startZoo serves a reference target of internal/zoo on 127.0.0.1 over a
// fresh lesson bank (₦75,000 in all).
func startZoo(t *testing.T, m zoo.Member) (*zoo.Server, *zoo.Bank) {
	t.Helper()
	bank := zoo.NewBank()
	s, err := zoo.Start(m, bank)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, bank
}

// restartCommand is a shell command that restarts s, as a team's
// "systemctl restart api" restarts their server.
func restartCommand(t *testing.T, s *zoo.Server) string {
	t.Helper()
	cmd, stop, err := zoo.RestartCommand(t.TempDir(), s.Restart)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return cmd
}
