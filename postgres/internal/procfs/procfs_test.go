package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestScanChildrenAndCmdlineSeeAChild(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	if kids := Children(os.Getpid()); !slices.Contains(kids, pid) {
		t.Errorf("Children(%d) = %v, want it to hold the child %d", os.Getpid(), kids, pid)
	}
	// Start returns once the exec has begun, which is not once the new
	// program's arguments are in place: until then the kernel shows an
	// empty command line (seen in CI: Cmdline = ""). Wait for it, bounded.
	got := Cmdline(pid)
	for deadline := time.Now().Add(5 * time.Second); got == "" && time.Now().Before(deadline); got = Cmdline(pid) {
		time.Sleep(time.Millisecond)
	}
	if got != "sleep 30" {
		t.Errorf("Cmdline(%d) = %q, want %q", pid, got, "sleep 30")
	}
	var me *Proc
	for _, p := range Scan() {
		if p.PID == os.Getpid() {
			me = &p
		}
	}
	if me == nil || me.PPID != os.Getppid() || me.State == 0 {
		t.Errorf("Scan: this process is %+v, want pid %d with parent %d", me, os.Getpid(), os.Getppid())
	}
	if Cmdline(-1) != "" {
		t.Error("Cmdline of no process is not empty")
	}
}
