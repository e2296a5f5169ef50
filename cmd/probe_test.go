package cmd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/banksim/bank-sim/cmd"
	"github.com/banksim/bank-sim/probe"
)

// A target that cannot be judged is never a failed check: unreachable or
// silent is 3, not speaking the contract is 2, and the message is one line.
func TestProbeExitCodes(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer silent.Close()
	defer close(hang)
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
	}))
	defer refusing.Close()

	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"nothing listens", []string{"probe", "http://127.0.0.1:1"}, cmd.ExitUnreachable, "cannot reach http://127.0.0.1:1: connection refused"},
		{"never answers", []string{"probe", silent.URL, "--timeout", "200ms"}, cmd.ExitUnreachable, "gave no answer in time to a plain GET (waited 200ms)"},
		{"no such route", []string{"probe", notFound.URL}, cmd.ExitUsage, "Give it with --path"},
		{"token refused", []string{"probe", refusing.URL}, cmd.ExitUsage, "the token was not accepted. Give the right one with --token ada=TOKEN"},
		{"remote", []string{"probe", "http://192.0.2.1:8080"}, cmd.ExitUsage, "Add --allow-remote"},
		{"unknown user", []string{"probe", "http://127.0.0.1:1", "--account", "eve=4"}, cmd.ExitUsage, "the users are ada (pays)"},
		{"no url", []string{"probe"}, cmd.ExitUsage, "give the target's base URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, context.Background(), mustNotStart(t), tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", r.code, tc.code, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.says) {
				t.Errorf("stderr does not say %q: %s", tc.says, r.stderr)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
				t.Errorf("stderr should be one clear line (and the usage hint): %q", r.stderr)
			}
		})
	}
}

// bank-sim probe against bank-sim serve, both through the command line:
// every check passes, hang-up included (serve's work runs on a context of
// its own, so a client that hangs up leaves no key blocked for its 30 s
// lock: issue 7, defect 1), serve's replays are its first answers byte for
// byte (--exact-replays), and the bank ends where it started, also after a
// second probe interrupted mid-run.
func TestProbeAgainstServe(t *testing.T) {
	t.Parallel()
	sv := startServe(t)
	url := sv.url

	htmlPath := filepath.Join(t.TempDir(), "probe.html")
	r := run(t, context.Background(), mustNotStart(t), "probe", url, "--seed", "11", "--json", "--exact-replays",
		"--balances-url", url+"/accounts/{id}", "--token", "chidi=token-chidi", "--html", htmlPath)
	if r.code != cmd.ExitOK {
		t.Errorf("probe exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	var rep probe.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	for _, c := range rep.Checks {
		want := probe.Pass
		if c.Name == "other-copy" || c.Name == "restart" || c.Name == "db-faults" {
			want = probe.Skipped // one URL; no --restart; no --db-proxy
		}
		if c.Status != want {
			t.Errorf("%s: %s, want %s: %s", c.Name, c.Status, want, c.Reason)
		}
	}
	if rep.Restore == nil || !rep.Restore.OK {
		t.Errorf("restore: %+v", rep.Restore)
	}
	// --html beside --json: the same run as a page, every check in it once.
	page, err := os.ReadFile(htmlPath)
	if err != nil {
		t.Fatalf("--html: %v; stderr:\n%s", err, r.stderr)
	}
	for _, c := range rep.Checks {
		if n := strings.Count(string(page), fmt.Sprintf(`<tr data-check="%s" data-status="%s">`, c.Name, c.Status)); n != 1 {
			t.Errorf("--html: the summary has %s (%s) %d times, want once", c.Name, c.Status, n)
		}
	}

	// --restart runs its command with sh -c between a key's answer and its
	// retry, its output kept as evidence (serve is not restarted by it: its
	// keys are in PostgreSQL either way); without --db-proxy, db-faults says
	// which flag would check it.
	r = run(t, context.Background(), mustNotStart(t), "probe", url, "--seed", "13", "--json", "--only", "restart,db-faults",
		"--restart", "echo restarting api", "--wait-for", "5s")
	var rr probe.Report
	if err := json.Unmarshal([]byte(r.stdout), &rr); err != nil || r.code != cmd.ExitOK {
		t.Fatalf("probe --restart: exit %d, %v\n%s\n%s", r.code, err, r.stdout, r.stderr)
	}
	if c, _ := rr.Check("restart"); c.Status != probe.Pass || !strings.Contains(strings.Join(c.Evidence, "\n"), "--restart printed: restarting api") {
		t.Errorf("restart: %s %s %q", c.Status, c.Reason, c.Evidence)
	}
	if c, _ := rr.Check("db-faults"); c.Status != probe.Skipped || !strings.Contains(c.Reason, "--db-proxy LISTEN=UPSTREAM") {
		t.Errorf("db-faults: %s %s", c.Status, c.Reason)
	}

	// Ctrl-C in the middle of a second probe: exit 130, the money it moved
	// goes back, and the message does not claim to have stopped a
	// PostgreSQL it never started, nor the target. Settling what the
	// interrupt cut short takes up to --timeout plus --settle (it took the
	// whole of the default 10 s here), so this probe gets 3 s + 2 s: still
	// ample for a server in this process.
	p := startCommand(t, mustNotStart(t), "PASS", "", "probe", url, "--seed", "12", "--no-color", "--timeout", "3s", "--settle", "2s")
	p.interrupt()
	if c := p.exit(t); c != cmd.ExitInterrupted {
		t.Errorf("interrupted probe exit %d, want %d; stderr:\n%s", c, cmd.ExitInterrupted, p.errOut.String())
	}
	perr := p.errOut
	wantErr := regexp.MustCompile(`(?m)^bank-sim probe: interrupted after \d+ check\(s\); restore: bola sent ₦[\d,.]+ back to ada: 201 .*\n` +
		`bank-sim: interrupted; the probe started no PostgreSQL and has closed its fault proxy; the target ` + regexp.QuoteMeta(url) + ` is not bank-sim's and keeps running\n$`)
	if !wantErr.MatchString(perr.String()) || strings.Contains(perr.String(), "PostgreSQL stopped") {
		t.Errorf("interrupted probe's stderr:\n%s", perr.String())
	}

	sv.stop(t)
	// serve prints the ledger as it stops: the probe sent everything back.
	if !strings.Contains(sv.out.String(), "Ada ₦50,000, Bola ₦5,000, Chidi ₦20,000 | total ₦75,000") {
		t.Errorf("the bank did not end where it started:\n%s", sv.out.String())
	}
}

// served is bank-sim serve, run in-process through the command line on a
// free port of 127.0.0.1.
type served struct {
	*running
	url string
}

// startServe starts serve and waits (at most 2 minutes) until it serves.
func startServe(t *testing.T) *served {
	t.Helper()
	r := startCommand(t, nil, "Ctrl-C to stop", "", "serve", "--addr", "127.0.0.1:0")
	return &served{running: r, url: regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(r.out.String())}
}

// stop stops serve as a signal does: exit 130, its ledger printed.
func (sv *served) stop(t *testing.T) {
	t.Helper()
	sv.interrupt()
	if c := sv.exit(t); c != cmd.ExitInterrupted {
		t.Errorf("serve exit %d; stderr:\n%s", c, sv.errOut.String())
	}
}
