package postgres

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBinaries is a directory whose bin/pg_ctl says it is the given version.
func fakeBinaries(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'pg_ctl (PostgreSQL) " + version + "'\n"
	// Written by a child process, not by os.WriteFile: a test running beside
	// this one may fork while this process holds the file open for writing,
	// and its child keeps that descriptor until it execs; running pg_ctl in
	// that moment failed with "text file busy" (ETXTBSY).
	cmd := exec.Command("sh", "-c", `printf '%s' "$1" > "$2" && chmod 755 "$2"`, "sh", script, filepath.Join(dir, "bin", "pg_ctl"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing a fake pg_ctl: %v: %s", err, out)
	}
	return dir
}

// Binaries older than the oldest major bank-sim runs on are refused with a
// message that names that major; the oldest one itself is taken.
func TestLocalBinariesRefuseTooOldAMajor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := localBinaries(ctx, fakeBinaries(t, "12.20"))
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "needs 13 or newer") {
		t.Errorf("PostgreSQL 12: %v, want unavailable, needs 13 or newer", err)
	}
	b, err := localBinaries(ctx, fakeBinaries(t, "13.16"))
	if err != nil || b.major != 13 {
		t.Errorf("PostgreSQL 13: %+v, %v; want major 13", b, err)
	}
}
