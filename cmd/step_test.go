package cmd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/scenarios"
	"golang.org/x/sys/unix"
)

// syncBuffer is a buffer that many goroutines may write and one may read.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until what holds at least n copies of want, or fails the
// test saying what it waited for.
func waitFor(t *testing.T, what interface{ String() string }, want string, n int, limit time.Duration, done <-chan int) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if strings.Count(what.String(), want) >= n {
			return
		}
		select {
		case code := <-done:
			t.Fatalf("exited %d while waiting for %d× %q; output:\n%s", code, n, want, what.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %d× %q; output so far:\n%s", limit, n, want, what.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const prompt = "Enter: next · q: quit"

// --step with scripted input: each key advances the story by one step, and
// it holds at each phase's verdict.
func TestStepAdvancesOneStepPerKey(t *testing.T) {
	t.Parallel()
	keys, typist := io.Pipe()
	defer typist.Close()
	var out, errOut syncBuffer
	env := &cmd.Env{
		Stdin: keys, Stdout: &out, Stderr: &errOut, StdinTerminal: true,
		Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start,
	}
	done := make(chan int, 1)
	go func() {
		done <- cmd.Run(context.Background(), env, []string{"scenario", "lost-response", "--step", "--seed", "1"})
	}()

	// What must be on the screen at each pause, and what must not be yet.
	pauses := []struct{ shown, notYet string }{
		{"▸ 1/2 without protection", "attempt 1:"},
		{"⇒ what goes wrong: no intent moved money twice", "▸ 2/2"},
		{"▸ 2/2 with protection", "makes key"},
		{"✓ all 5 invariants hold", "PASS"},
	}
	for i, p := range pauses {
		waitFor(t, &errOut, prompt, i+1, 2*time.Minute, done)
		if s := out.String(); !strings.Contains(s, p.shown) || strings.Contains(s, p.notYet) {
			t.Fatalf("at pause %d: want %q shown and %q not yet; stdout:\n%s", i+1, p.shown, p.notYet, s)
		}
		if _, err := typist.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case code := <-done:
		if code != cmd.ExitOK {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("did not finish within a minute of the last key; stdout:\n%s", out.String())
	}
	if n := strings.Count(errOut.String(), prompt); n != len(pauses) {
		t.Errorf("%d pauses, want %d", n, len(pauses))
	}
	if !strings.Contains(out.String(), "PASS lost-response") {
		t.Errorf("the story did not end:\n%s", out.String())
	}
}

// openPTY opens a pseudo-terminal: --step needs a real one, in which a key
// arrives without Enter and Ctrl-C is a signal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pty: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// runOnTTY starts bank-sim (the test binary, as testscript installs it in
// $PATH) on a pseudo-terminal and returns its output so far and its exit.
func runOnTTY(t *testing.T, args ...string) (*exec.Cmd, *os.File, *syncBuffer, <-chan int) {
	t.Helper()
	master, tty := openPTY(t)
	c := exec.Command("bank-sim", args...)
	c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
	c.Env = append(os.Environ(), "COLUMNS=80", "TERM=xterm")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := c.Start(); err != nil {
		t.Fatalf("start bank-sim: %v", err)
	}
	tty.Close()
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, master) }()
	exited := make(chan int, 1)
	go func() {
		err := c.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			exited <- 0
		case errors.As(err, &ee):
			exited <- ee.ExitCode()
		default:
			exited <- -1
		}
	}()
	t.Cleanup(func() { _ = c.Process.Kill() })
	return c, master, &out, exited
}

var portRe = regexp.MustCompile(`embedded PostgreSQL \S+ on 127\.0\.0\.1:(\d+)`)

// quitsAtOnce waits (bounded) for bank-sim to exit 130 after it was told
// to stop, and for its PostgreSQL to stop accepting connections.
func quitsAtOnce(t *testing.T, how string, out *syncBuffer, exited <-chan int) {
	t.Helper()
	told := time.Now()
	select {
	case code := <-exited:
		t.Logf("%s: exited %d after %s", how, code, time.Since(told).Round(time.Millisecond))
		if code != cmd.ExitInterrupted {
			t.Fatalf("%s: exit %d, want %d; output:\n%s", how, code, cmd.ExitInterrupted, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still running 10 s later; output:\n%s", how, out.String())
	}
	m := portRe.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no embedded PostgreSQL named in the output:\n%s", out.String())
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("%s: PostgreSQL still accepts connections on port %s 5 s after bank-sim exited", how, m[1])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(out.String(), "PASS") {
		t.Errorf("%s: the story went on to the end:\n%s", how, out.String())
	}
}

// On a real terminal, a key advances at once (no Enter), and q quits: exit
// 130, PostgreSQL stopped.
func TestStepQuitsAtQ(t *testing.T) {
	t.Parallel()
	_, master, out, exited := runOnTTY(t, "scenario", "lost-response", "--step", "--seed", "1", "--no-color")
	waitFor(t, out, prompt, 1, 2*time.Minute, exited)
	if _, err := master.Write([]byte(" ")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, out, prompt, 2, 30*time.Second, exited)
	if !strings.Contains(out.String(), "what goes wrong") {
		t.Fatalf("one key did not advance to the verdict:\n%s", out.String())
	}
	if _, err := master.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	quitsAtOnce(t, "q", out, exited)
	if !strings.Contains(out.String(), "stopped at q") {
		t.Errorf("no word that q stopped the run:\n%s", out.String())
	}
}

// Ctrl-C while --step waits for a key ends the run at once.
func TestStepQuitsOnSIGINT(t *testing.T) {
	t.Parallel()
	c, _, out, exited := runOnTTY(t, "scenario", "lost-response", "--step", "--seed", "1", "--no-color")
	waitFor(t, out, prompt, 1, 2*time.Minute, exited)
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	quitsAtOnce(t, "SIGINT", out, exited)
}

// A loop of identical steps advances as one: one pause for the header and
// the loop, one for the next step, one at the verdict.
func TestStepAdvancesALoopAsOne(t *testing.T) {
	defer scenarios.Register(scenarios.Scenario{
		Name:    "zz-step-loop",
		Summary: "a loop of identical steps",
		Phases: []scenarios.Phase{{
			Title: "a loop",
			Run: func(ctx context.Context, r *scenarios.Run) error {
				for range 5 {
					r.Step("Ada's app sends ₦1,000 at the same moment")
				}
				r.Step("the rounds are over")
				return nil
			},
		}},
	})()
	var out, errOut syncBuffer
	env := &cmd.Env{
		Stdin: strings.NewReader(strings.Repeat("\n", 10)), Stdout: &out, Stderr: &errOut, StdinTerminal: true,
		Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start,
	}
	if code := cmd.Run(context.Background(), env, []string{"scenario", "zz-step-loop", "--step", "--seed", "1"}); code != cmd.ExitOK {
		t.Fatalf("exit %d:\n%s\n%s", code, out.String(), errOut.String())
	}
	if n := strings.Count(errOut.String(), prompt); n != 3 {
		t.Errorf("%d pauses, want 3 (the loop, the next step, the verdict); stderr:\n%s", n, errOut.String())
	}
	if n := strings.Count(out.String(), "Ada's app sends ₦1,000 at the same moment"); n != 5 {
		t.Errorf("the loop's steps are still all printed: %d of 5", n)
	}
}

// Issue 21: in crash-takeover the moment to stop on is between the retry
// told 409 and the one that takes the lock over; one key must not show
// both.
func TestStepStopsBetweenTheTwoRetries(t *testing.T) {
	t.Parallel()
	var out, errOut syncBuffer
	keys, typist := io.Pipe()
	defer typist.Close()
	env := &cmd.Env{
		Stdin: keys, Stdout: &out, Stderr: &errOut, StdinTerminal: true,
		Getenv: os.Getenv, Now: time.Now, Postgres: postgres.Start,
	}
	done := make(chan int, 1)
	go func() {
		done <- cmd.Run(context.Background(), env, []string{"scenario", "crash-takeover", "--step", "--seed", "1"})
	}()
	const early, late = "retry after 10 s: 409", "retry after 31 s: 201"
	for n := 1; ; n++ {
		waitFor(t, &errOut, prompt, n, 2*time.Minute, done)
		s := out.String()
		if strings.Contains(s, early) {
			if strings.Contains(s, late) {
				t.Fatalf("one key showed both retries:\n%s", s)
			}
			break // the pause after the 409, before the takeover
		}
		if n > 10 {
			t.Fatalf("no pause after %q in 10 keys:\n%s", early, s)
		}
		if _, err := typist.Write([]byte("\n")); err != nil {
			t.Fatal(err)
		}
	}
	typist.Close() // no more keys: the rest runs without pauses
	select {
	case code := <-done:
		if code != cmd.ExitOK {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("did not finish within a minute of the last key; stdout:\n%s", out.String())
	}
	if !strings.Contains(out.String(), late) {
		t.Errorf("the story did not go on to the takeover:\n%s", out.String())
	}
}
