package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// entries lists the archive's entries as "name type [link]".
func entries(t *testing.T, b []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		e := h.Name + " " + string(h.Typeflag)
		if h.Typeflag == tar.TypeLink {
			e += " " + h.Linkname
		}
		out = append(out, e)
	}
	return out
}

func TestPackUnpackRoundTripsWithDuplicatesAsCopies(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	write(t, src, "PG_VERSION", "15\n")
	write(t, src, "base/1/1259", "catalog page")
	write(t, src, "base/4/1259", "catalog page") // same bytes as base/1's
	write(t, src, "base/5/1259", "another page")
	if err := os.MkdirAll(filepath.Join(src, "pg_notify"), 0o700); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Pack(&buf, src); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(entries(t, buf.Bytes()), "\n")
	if !strings.Contains(got, "base/4/1259 1 base/1/1259") {
		t.Errorf("base/4/1259 is not stored as a link to base/1/1259:\n%s", got)
	}
	if strings.Contains(got, "base/5/1259 1") {
		t.Errorf("base/5/1259 differs from base/1/1259 but is stored as a link:\n%s", got)
	}

	dst := filepath.Join(t.TempDir(), "copy")
	if err := Unpack(bytes.NewReader(buf.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"PG_VERSION": "15\n", "base/1/1259": "catalog page", "base/4/1259": "catalog page", "base/5/1259": "another page"} {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", name, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "pg_notify")); err != nil || !fi.IsDir() {
		t.Errorf("the empty directory pg_notify was not recreated: %v", err)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode = %v, %v; PostgreSQL wants 0700", fi.Mode().Perm(), err)
	}
	// The server rewrites pages in place: a duplicate must be its own file.
	if err := os.WriteFile(filepath.Join(dst, "base/4/1259"), []byte("rewritten"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "base/1/1259")); string(b) != "catalog page" {
		t.Errorf("writing base/4/1259 changed base/1/1259 to %q: unpacked as a hard link", b)
	}
}

func TestUnpackRefusesEntriesOutsideTheDirectory(t *testing.T) {
	for _, name := range []string{"../escape", "/etc/passwd", "a/../../escape"} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: 1})
		tw.Write([]byte("x"))
		tw.Close()
		zw.Close()
		parent := t.TempDir()
		err := Unpack(&buf, filepath.Join(parent, "data"))
		if err == nil || !strings.Contains(err.Error(), "outside the data directory") {
			t.Errorf("%q: err = %v; want it refused as outside the data directory", name, err)
		}
		if _, err := os.Stat(filepath.Join(parent, "escape")); err == nil {
			t.Errorf("%q was written outside the data directory", name)
		}
	}
}

func TestUnpackRefusesAnExistingDirectory(t *testing.T) {
	src := t.TempDir()
	write(t, src, "PG_VERSION", "15\n")
	var buf bytes.Buffer
	if err := Pack(&buf, src); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir() // exists
	write(t, dst, "keep", "mine")
	if err := Unpack(&buf, dst); err == nil {
		t.Fatal("Unpack into an existing directory succeeded; it must refuse rather than mix two clusters")
	}
}

func TestPackRefusesSymlinks(t *testing.T) {
	src := t.TempDir()
	write(t, src, "PG_VERSION", "15\n")
	if err := os.Symlink("/tmp", filepath.Join(src, "pg_wal")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Pack(&buf, src); err == nil || !strings.Contains(err.Error(), "only directories and regular files") {
		t.Fatalf("Pack with a symlinked pg_wal: err = %v; want a refusal", err)
	}
}

// BenchmarkUnpack unpacks the built-in snapshot (the file bank-sim embeds,
// read from the source tree) once per iteration, into a new directory on
// the file system TMPDIR is on: set TMPDIR to the cache directory's file
// system to measure what a first run pays there.
func BenchmarkUnpack(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "snapshots", "*.tar.gz"))
	if len(files) == 0 {
		b.Skip("no snapshot in postgres/snapshots")
	}
	archive, err := os.ReadFile(files[0])
	if err != nil {
		b.Fatal(err)
	}
	parent := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(parent, "data")
		if err := Unpack(bytes.NewReader(archive), dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dst); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
