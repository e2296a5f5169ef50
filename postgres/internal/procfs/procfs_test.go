package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
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
	if got := Cmdline(pid); got != "sleep 30" {
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
