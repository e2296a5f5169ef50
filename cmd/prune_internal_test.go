package cmd

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// prune says what it does with a postmaster a killed HA cluster left
// running: that a dry run would stop it, that it stopped it, and, for a
// postgres it cannot prove bank-sim's, that the directory is kept and why.
// The clusters' directories are forged here (the mark is what makeDir
// writes); the postmasters are copies of sleep named postgres.
func TestPruneSaysWhatItDoesWithALeftoverPostmaster(t *testing.T) {
	tmp := t.TempDir()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(tmp, "bin", "postgres")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ours, theirs := forgeCluster(t, tmp, "ours"), forgeCluster(t, tmp, "theirs")

	// The proof compares clocks, with 50 ms of slack: a postmaster starts
	// well after its directory's mark.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		fi, err := os.Stat(filepath.Join(theirs, "bank-sim-ha.made"))
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(time.Unix(fi.Sys().(*syscall.Stat_t).Ctim.Unix())) > 200*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the mark's ctime stays in the future")
		}
	}
	start := func(dir, data string) int {
		t.Helper()
		c := exec.Command(fake, "600")
		c.Dir = dir
		now := time.Now().Unix()
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		t.Cleanup(func() { c.Process.Kill(); <-done })
		pidFile := fmt.Sprintf("%d\n%s\n%d\n5432\n\n\n  0 0\nready   \n", c.Process.Pid, data, now)
		if err := os.WriteFile(filepath.Join(data, "postmaster.pid"), []byte(pidFile), 0o600); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c.Process.Pid)); exe == fake {
				return c.Process.Pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start", fake)
			}
		}
	}
	pm := start(filepath.Join(ours, "node1"), filepath.Join(ours, "node1"))
	other := start(tmp, filepath.Join(theirs, "node1")) // works elsewhere

	prune := func(dryRun bool, verb string) string {
		t.Helper()
		var out bytes.Buffer
		app := &App{Env: &Env{Stdout: &out, Stderr: &out, Getenv: func(k string) string {
			if k == "TMPDIR" {
				return tmp
			}
			return ""
		}}}
		var tally pruneTally
		pruneHA(app, newPalette(false), dryRun, verb, &tally)
		return out.String()
	}
	want := func(out, re string) {
		t.Helper()
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("prune said:\n%s\nwant a line matching %s", out, re)
		}
	}
	kept := `(?m)^  kept +` + regexp.QuoteMeta(theirs) + ` .* its run has ended, but a PostgreSQL server may still run on it: node1/postmaster.pid names process ` +
		fmt.Sprint(other) + `, a running postgres \(` + regexp.QuoteMeta(fake) + `\) working in another directory, not this data directory; not stopped: stop it and remove the directory yourself if it is bank-sim's$`

	out := prune(true, "would remove")
	want(out, `(?m)^  would remove +`+regexp.QuoteMeta(ours)+` .* its run has ended; the postmaster of node1 \(pid `+fmt.Sprint(pm)+`\), left running by its killed agent, would be stopped$`)
	want(out, kept)
	out = prune(false, "removed")
	want(out, `(?m)^  removed +`+regexp.QuoteMeta(ours)+` .* its run has ended; the postmaster of node1 \(pid `+fmt.Sprint(pm)+`\), left running by its killed agent, stopped$`)
	want(out, kept)
}

// forgeCluster makes the directory of a dead HA test cluster, marked as
// bank-sim's, with a data directory node1.
func forgeCluster(t *testing.T, tmp, name string) string {
	t.Helper()
	dir := filepath.Join(tmp, "bank-sim-ha-"+name)
	if err := os.MkdirAll(filepath.Join(dir, "node1"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	for file, content := range map[string]string{
		"bank-sim-ha.lock":  "",
		"bank-sim-ha.procs": "",
		"bank-sim-ha.made":  fmt.Sprintf("a pg_auto_failover cluster directory made by bank-sim: %s (device %d, inode %d)\n", dir, st.Dev, st.Ino),
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
