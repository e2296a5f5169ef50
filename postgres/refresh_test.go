package postgres

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A pair's cluster made over the last pair's is the base again, byte for
// byte: what the last servers wrote is copied again, what they made is
// gone, and a file they never wrote is not copied again, which is what
// makes it cheap.
func TestRefreshTreeMakesTheBaseAgainOverTheLastCopy(t *testing.T) {
	base, dst := filepath.Join(t.TempDir(), "base"), filepath.Join(t.TempDir(), "copy")
	old := time.Now().Add(-time.Hour)
	for name, body := range map[string]string{
		"PG_VERSION":            "15\n",
		"global/pg_control":     "control",
		"base/1/1259":           "catalog",
		"base/5/2619":           "untouched",
		"pg_wal/0001":           string(make([]byte, 200<<10)) + "tail",
		"postgresql.auto.conf":  "# auto\n",
		"pg_logical/replorigin": "8",
	} {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := refreshTree(base, dst); err != nil {
		t.Fatal(err)
	}
	same(t, base, dst)

	// What a pair's servers do to their copy: write in place (the same
	// size, a later time), append, make databases, segments and files,
	// and turn a file into a directory.
	write := func(name, body string) {
		p := filepath.Join(dst, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("global/pg_control", "CONTROL")
	write("postgresql.auto.conf", "# auto\nprimary_conninfo = 'x'\n")
	write("base/16384/1259", "the bank")
	write("pg_wal/0002", "next segment")
	write("standby.signal", "")
	os.Remove(filepath.Join(dst, "pg_logical/replorigin"))
	write("pg_logical/replorigin/x", "now a directory")
	os.Truncate(filepath.Join(dst, "pg_wal/0001"), 10)

	if err := refreshTree(base, dst); err != nil {
		t.Fatal(err)
	}
	same(t, base, dst)

	// A file with the base's size and time is taken to be the base's, and
	// not read: changed in the base behind the copy's back, it stays as
	// the copy has it.
	p := filepath.Join(base, "base/5/2619")
	if err := os.WriteFile(p, []byte("UNTOUCHED"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := refreshTree(base, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "base/5/2619")); string(got) != "untouched" {
		t.Errorf("a file of the base's size and time was copied again: %q", got)
	}
}

// same fails the test unless dst holds exactly base's files, with base's
// contents and permissions.
func same(t *testing.T, base, dst string) {
	t.Helper()
	seen := map[string]bool{}
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(base, p)
		seen[rel] = true
		if d.IsDir() {
			return nil
		}
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes (%v), want base's %d", rel, len(got), err, len(want))
		}
		if fi, err := os.Stat(filepath.Join(dst, rel)); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v", rel, fi.Mode().Perm())
		}
		return nil
	})
	filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dst, p)
		if !seen[rel] {
			t.Errorf("%s is not in the base", rel)
		}
		return nil
	})
}
