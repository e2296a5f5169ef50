package teamcmd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/banksim/bank-sim/internal/teamcmd"
)

// A command that outlives its bound is killed with everything it started:
// no process of its group is left running (a background child that
// ignores the end of sh included), and Run returns soon after the bound.
func TestACommandPastItsBoundLeavesNoProcess(t *testing.T) {
	t.Parallel()
	// $$ is sh's pid, its group's id; the child ignores SIGTERM and SIGHUP.
	res := teamcmd.Run(context.Background(), `echo $$; (trap "" TERM HUP; sleep 60) & sleep 60`, 300*time.Millisecond, 1024)
	if !errors.Is(res.Killed, context.DeadlineExceeded) || res.ExitCode != -1 {
		t.Fatalf("a command past its bound: killed %v, exit %d; want killed at its deadline, exit -1", res.Killed, res.ExitCode)
	}
	if res.Duration > 10*time.Second {
		t.Errorf("Run returned %s after a bound of 300ms", res.Duration)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(res.Output))
	if err != nil {
		t.Fatalf("output %q: want sh's pid", res.Output)
	}
	// Killed processes are gone once reaped: wait for that, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		alive := inGroup(t, pgid)
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the bound, processes of the command's group %d still run: %v", pgid, alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inGroup lists the processes of group pgid that are not zombies.
func inGroup(t *testing.T, pgid int) []string {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var alive []string
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue // ended while listed
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so after ")".
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			alive = append(alive, s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return alive
}

// Output longer than the tail keeps its last bytes, stdout and stderr
// together, not its first.
func TestOutputKeepsItsLastBytes(t *testing.T) {
	t.Parallel()
	res := teamcmd.Run(context.Background(), `seq 1 3000; echo last >&2`, 10*time.Second, 100)
	var all strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintln(&all, i)
	}
	all.WriteString("last\n")
	if want := all.String()[all.Len()-100:]; res.Output != want {
		t.Fatalf("output tail:\n%q\nwant the last 100 bytes:\n%q", res.Output, want)
	}
	if res.ExitCode != 0 || res.Err != nil || res.Killed != nil {
		t.Errorf("a command that succeeded: exit %d, err %v, killed %v", res.ExitCode, res.Err, res.Killed)
	}
}

// The exit status is the command's own, and a command that ends by itself
// is not reported killed.
func TestExitStatusIsReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cmd  string
		code int
	}{{"true", 0}, {"echo no such unit >&2; exit 5", 5}, {"no-such-command-bank-sim", 127}} {
		res := teamcmd.Run(context.Background(), tc.cmd, 10*time.Second, 1024)
		if res.ExitCode != tc.code || res.Killed != nil || (tc.code != 0) != (res.Err != nil) {
			t.Errorf("%q: exit %d, killed %v, err %v; want exit %d", tc.cmd, res.ExitCode, res.Killed, res.Err, tc.code)
		}
	}
}
