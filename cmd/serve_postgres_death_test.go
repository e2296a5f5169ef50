package cmd_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/postgres"
)

// capturing starts PostgreSQL as bank-sim would, in cacheDir unless it is
// "", and hands the server to the test.
func capturing(cacheDir string, got chan<- *postgres.Server) func(context.Context, postgres.Options) (*postgres.Server, error) {
	return func(ctx context.Context, o postgres.Options) (*postgres.Server, error) {
		if cacheDir != "" {
			o.CacheDir = cacheDir
		}
		s, err := postgres.Start(ctx, o)
		if err == nil {
			got <- s
		}
		return s, err
	}
}

// transfer posts a transfer with key, again on any failure (the key makes
// that safe), until it is answered 201 or within gives out.
func transfer(t *testing.T, url, key string, within time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("POST", url+"/transfers", strings.NewReader(`{"from":1,"to":2,"amountKobo":100000}`))
		req.Header.Set("Authorization", "Bearer token-ada")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		res.Body.Close()
		if res.StatusCode == 201 {
			return
		}
		last = res.Status
	}
	t.Fatalf("POST /transfers with key %s: no 201 within %v (last: %s)", key, within, last)
}

func waitPidGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs 30 s on", what, pid)
		}
	}
}

// waitStderr polls stderr until it shows want, for a minute at most.
func waitStderr(t *testing.T, r *running, want string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !strings.Contains(r.errOut.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for stderr to say %q:\n%s", want, r.errOut.String())
		}
	}
}

// Issue 19 item 5: serve's embedded PostgreSQL is SIGKILLed. Its
// supervisor starts it again and serve says so; the transfer committed
// before is still there, serve takes new transfers, and on Ctrl-C what it
// says is true: PostgreSQL stops.
func TestServeRecoversWhenItsPostgresIsKilled(t *testing.T) {
	t.Parallel()
	got := make(chan *postgres.Server, 1)
	r := startCommand(t, capturing("", got), "Ctrl-C to stop", "", "serve", "--addr", "127.0.0.1:0", "--quiet")
	srv := <-got
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(r.out.String())
	transfer(t, url, "before-the-kill-0000000001", 30*time.Second)

	pid := srv.PostmasterPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStderr(t, r, fmt.Sprintf("bank-sim serve: PostgreSQL (postmaster %d) was killed by signal 9 (killed); bank-sim started it again", pid))
	transfer(t, url, "after-the-kill-00000000001", 30*time.Second)
	t.Logf("stderr:\n%s", r.errOut.String())

	r.interrupt()
	if c := r.exit(t); c != cmd.ExitInterrupted {
		t.Fatalf("exit %d, want %d; stderr:\n%s", c, cmd.ExitInterrupted, r.errOut.String())
	}
	out := r.out.String()
	if !strings.Contains(out, "Ada ₦48,000, Bola ₦7,000, Chidi ₦20,000 | total ₦75,000 | transfers 2") {
		t.Errorf("the final ledger does not show both transfers:\n%s", out)
	}
	if !strings.Contains(out, "stopped; the bank is dropped and PostgreSQL stops") {
		t.Errorf("stdout:\n%s", out)
	}
	waitPidGone(t, srv.PostmasterPID(), "the restarted postmaster")
}

// When the supervisor cannot start it again (its data directory has gone),
// serve stops at once with exit 3 and says what happened, instead of
// answering 500 to every request; nothing is left running, and it does not
// claim to have dropped the bank.
func TestServeStopsWhenItsPostgresCannotBeRestarted(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "bank-sim-serve-pg-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // the supervisor runs as nobody
	t.Cleanup(func() { os.RemoveAll(dir) })
	got := make(chan *postgres.Server, 1)
	r := startCommand(t, capturing(dir, got), "Ctrl-C to stop", "", "serve", "--addr", "127.0.0.1:0", "--quiet")
	srv := <-got
	data, _ := filepath.Glob(filepath.Join(dir, "pg*", "slot-*", "data"))
	if len(data) != 1 {
		t.Fatalf("data directories in %s: %v, want one", dir, data)
	}
	if err := os.Rename(data[0], data[0]+".gone"); err != nil {
		t.Fatal(err)
	}
	pid := srv.PostmasterPID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if c := r.exit(t); c != cmd.ExitDatabase {
		t.Fatalf("exit %d, want %d; stderr:\n%s", c, cmd.ExitDatabase, r.errOut.String())
	}
	errOut, out := r.errOut.String(), r.out.String()
	t.Logf("stderr:\n%s", errOut)
	want := fmt.Sprintf("bank-sim: serve stopped: PostgreSQL (postmaster %d) was killed by signal 9 (killed), and bank-sim could not start it again: ", pid)
	if !strings.Contains(errOut, want) || !strings.Contains(errOut, "nothing is left running") {
		t.Errorf("stderr does not say what happened (%q):\n%s", want, errOut)
	}
	if strings.Count(errOut, "could not start it again") != 2 { // the log line, and the reason it exits
		t.Errorf("stderr:\n%s", errOut)
	}
	if strings.Contains(out, "the bank is dropped") || strings.Contains(errOut, "stopping PostgreSQL") {
		t.Errorf("serve claims what it could not do; stdout:\n%s\nstderr:\n%s", out, errOut)
	}
	waitPidGone(t, pid, "the killed postmaster")
}
