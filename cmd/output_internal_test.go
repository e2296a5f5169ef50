package cmd

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/scenarios"
	"github.com/spf13/cobra"
)

func TestHumanTextShortensIDsAndNamesIntents(t *testing.T) {
	h := newHumanizer(map[string]string{"ada-race-1-1": "first", "ada-race-1-10": "tenth"})
	cases := map[string]string{
		"key 5a758367-56b2-42f7-bff1-05e9c337f678 once":   "key 5a758367… once",
		"token lock-74bbe437bcb5e610 and went silent":     "token lock-74bbe437… and went silent",
		"ada-race-1-10 moved money 2 times; ada-race-1-1": "tenth moved money 2 times; first",
		"tap-2026-09-24-0001 stays whole":                 "tap-2026-09-24-0001 stays whole",
	}
	for in, want := range cases {
		if got := h.text(in); got != want {
			t.Errorf("%q:\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestDurationsAreRoundedForPeople(t *testing.T) {
	cases := map[time.Duration]string{
		62230367 * time.Nanosecond: "62 ms",
		359 * time.Millisecond:     "359 ms",
		1500 * time.Millisecond:    "1.5 s",
	}
	for d, want := range cases {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	story := map[time.Duration]string{
		24 * time.Hour:          "24 h",
		31 * time.Second:        "31 s",
		time.Second:             "1 s",
		90 * time.Minute:        "1 h 30 min",
		62 * time.Millisecond:   "62 ms",
		-25 * time.Hour:         "-25 h",
		2500 * time.Millisecond: "2.5 s",
	}
	for d, want := range story {
		if got := scenarios.Dur(d); got != want {
			t.Errorf("Dur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestWrapKeepsWordsAndWidth(t *testing.T) {
	text := "the server answered 201 transfer 1; the answer was lost on the way back"
	lines := wrap(text, 20)
	if strings.Join(lines, " ") != text {
		t.Errorf("words lost or changed: %q", lines)
	}
	for _, l := range lines {
		if width(l) > 20 {
			t.Errorf("line %q is %d columns", l, width(l))
		}
	}
	if got := wrap("₦10,000 ₦20,000", 7); len(got) != 2 || got[0] != "₦10,000" {
		t.Errorf("₦ counts as one column: %q", got)
	}
}

func TestFlagErrorsSpeakTheUsersTerms(t *testing.T) {
	c := &cobra.Command{Use: "x"}
	c.Flags().Int("parallel", 4, "")
	c.Flags().Duration("pace", 0, "")
	c.Flags().String("faults", "", "")
	cases := map[string]string{
		`unknown flag: --fault`:   `unknown flag: --fault; did you mean --faults?`,
		`unknown flag: --paralel`: `unknown flag: --paralel; did you mean --parallel?`,
		`invalid argument "abc" for "--parallel" flag: strconv.ParseInt: parsing "abc": invalid syntax`: `--parallel "abc" is not a whole number`,
		`invalid argument "soon" for "--pace" flag: time: invalid duration "soon"`:                      `--pace "soon" is not a duration such as 500ms, 10s, 2m or 1h`,
		`unknown flag: --nope`: `unknown flag: --nope`,
	}
	for in, want := range cases {
		if got := flagError(c, errors.New(in)); got != want {
			t.Errorf("%s:\n got %q\nwant %q", in, got, want)
		}
	}
}

func TestVersionComesFromTheBuildInfo(t *testing.T) {
	cases := []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, "devel-0123456789ab+dirty"},
		{debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
	}
	for _, c := range cases {
		if got := versionFrom(&c.bi); got != c.want {
			t.Errorf("versionFrom(%+v) = %q, want %q", c.bi.Main, got, c.want)
		}
	}
}

// A report file gets the mode any new file would: 0666 less the umask, not
// CreateTemp's 0600.
func TestReportFilesHonourTheUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "junit.xml")
	if err := writeFileAtomic("--junit", path, []byte("<x/>")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640 (0666 less umask 027)", st.Mode().Perm())
	}
}

// An output file is checked before the run: a directory that cannot take a
// new file is a usage error up front.
func TestOutputFileCheckedUpFront(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes anywhere; use a directory that does not exist instead.
		if err := checkOutputFile("--junit", filepath.Join(t.TempDir(), "no", "r.xml")); err == nil {
			t.Fatal("a missing directory was accepted")
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o755)
	err := checkOutputFile("--junit", filepath.Join(dir, "r.xml"))
	if err == nil || !strings.Contains(err.Error(), "cannot write in") {
		t.Fatalf("a read-only directory was accepted: %v", err)
	}
}

// Piped, a long run prints a progress line every interval, on stderr; on a
// terminal it redraws one line; an audit counts its runs.
func TestProgressLinesWhenPiped(t *testing.T) {
	var out, errOut strings.Builder
	app := &App{Env: &Env{Stdout: &out, Stderr: &errOut}}
	bar := newProgress(app, "runs", "bank-sim audit:", false)
	clock := faults.NewClock(time.Date(2026, 9, 24, 10, 0, 0, 0, time.UTC))
	bar.now = clock.Now
	bar.update(1, 10) // the first interval starts
	clock.Advance(bar.every - time.Nanosecond)
	bar.update(2, 10) // within it: nothing
	clock.Advance(time.Nanosecond)
	bar.update(4, 10)
	if out.String() != "" || errOut.String() != "bank-sim audit: 4/10 runs (40%)\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}
	app.Env.Terminal = true
	bar = newProgress(app, "runs", "bank-sim audit:", false)
	bar.update(3, 10)
	if !strings.Contains(out.String(), "\r  [") || !strings.HasSuffix(out.String(), "30% 3/10 runs") {
		t.Errorf("terminal: %q", out.String())
	}
}
