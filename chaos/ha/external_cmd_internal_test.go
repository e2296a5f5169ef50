package ha

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The failover command's record: its own exit status and output, or, past
// its bound, exit -1 and why.
func TestFailoverCmdRecord(t *testing.T) {
	t.Parallel()
	start := time.Now()
	rec := runFailoverCmd(context.Background(), "echo promoting; exit 3", 10*time.Second, start)
	if rec.ExitCode != 3 || rec.Error != "" || strings.TrimSpace(rec.Output) != "promoting" || rec.EndNs < rec.StartNs {
		t.Errorf("a command that exits 3: %+v", rec)
	}
	rec = runFailoverCmd(context.Background(), "echo going; sleep 30", 200*time.Millisecond, start)
	if rec.ExitCode != -1 || rec.Error != "killed at its timeout, 200ms" || strings.TrimSpace(rec.Output) != "going" {
		t.Errorf("a command past its bound: %+v; want exit -1, killed at its timeout, its output kept", rec)
	}
}
