package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// sameTree fails the test unless dirs a and b hold the same directories and
// files with the same bytes.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	list := func(root string) map[string]string {
		m := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if d.IsDir() {
				m[rel] = "dir"
				return nil
			}
			body, err := os.ReadFile(p)
			m[rel] = string(body)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := list(a), list(b)
	for name, body := range ma {
		if got, ok := mb[name]; !ok {
			t.Errorf("%s is missing from the unpacked tree", name)
		} else if got != body {
			t.Errorf("%s: unpacked %d bytes differ from the packed %d", name, len(got), len(body))
		}
	}
	for name := range mb {
		if _, ok := ma[name]; !ok {
			t.Errorf("%s was unpacked but never packed", name)
		}
	}
}

// allocated is how many bytes the file system has allocated to the file.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestUnpackWritesZeroPagesAsHolesAndReadsBackTheSameBytes(t *testing.T) {
	src := filepath.Join(t.TempDir(), "data")
	walHead := bytes.Repeat([]byte("w"), 3*page+100) // a partly used last page
	tail := make([]byte, 2<<20)
	wal := append(append([]byte{}, walHead...), tail...) // a WAL segment: records, then zeros
	middle := append(append(bytes.Repeat([]byte("a"), page), make([]byte, 3*page)...), bytes.Repeat([]byte("b"), 10)...)
	for name, body := range map[string][]byte{
		"pg_wal/000000010000000000000001": wal,
		"pg_subtrans/0000":                make([]byte, page),  // all zeros, one page
		"pg_multixact/offsets/0000":       make([]byte, 1<<20), // all zeros, many pages
		"short-zeros":                     make([]byte, 100),   // all zeros, less than a page
		"base/1/2619":                     middle,              // zero pages between data, short last page
		"base/1/1259":                     bytes.Repeat([]byte("c"), 2*page),
		"empty":                           nil,
	} {
		write(t, src, name, string(body))
	}
	var buf bytes.Buffer
	if err := Pack(&buf, src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	if err := Unpack(bytes.NewReader(buf.Bytes()), dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, dst)

	// Whether the zeros were skipped shows only in the blocks allocated,
	// on a file system that makes holes (a truncated new file has none).
	probe := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(probe, 1<<20); err != nil {
		t.Fatal(err)
	}
	if allocated(t, probe) != 0 {
		t.Skipf("%s makes no holes; cannot tell whether zeros were written", filepath.Dir(probe))
	}
	if n := allocated(t, filepath.Join(dst, "pg_multixact/offsets/0000")); n != 0 {
		t.Errorf("an all-zero 1 MB file has %d bytes allocated; want a hole", n)
	}
	if n := allocated(t, filepath.Join(dst, "pg_wal/000000010000000000000001")); n > int64(len(walHead))+64<<10 {
		t.Errorf("a WAL segment of %d bytes, all but the first %d zeros, has %d bytes allocated; want its zero tail a hole", len(wal), len(walHead), n)
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

// A file named as a snapshot may be anything: an archive that claims a huge
// file, or that copies one file hundreds of times through links, is refused
// before it fills the disk.
func TestUnpackRefusesAnArchiveThatUnpacksTooLarge(t *testing.T) {
	big := func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "base", Typeflag: tar.TypeReg, Mode: 0o600, Size: MaxUnpacked + 1})
	}
	links := func(tw *tar.Writer) {
		const mib = 1 << 20
		tw.WriteHeader(&tar.Header{Name: "one", Typeflag: tar.TypeReg, Mode: 0o600, Size: mib})
		tw.Write(make([]byte, mib))
		for i := 0; i <= MaxUnpacked/mib; i++ {
			tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("copy%d", i), Typeflag: tar.TypeLink, Linkname: "one", Mode: 0o600})
		}
	}
	for name, fill := range map[string]func(*tar.Writer){"one huge file": big, "links to one file": links} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		fill(tw)
		tw.Flush()
		zw.Close()
		dst := filepath.Join(t.TempDir(), "data")
		err := Unpack(&buf, dst)
		if err == nil || !strings.Contains(err.Error(), "MiB unpacked") {
			t.Errorf("%s: err = %v; want it refused as too large", name, err)
		}
		var total int64
		filepath.Walk(dst, func(_ string, fi os.FileInfo, _ error) error {
			if fi != nil && fi.Mode().IsRegular() {
				total += fi.Size()
			}
			return nil
		})
		if total > MaxUnpacked {
			t.Errorf("%s: %d bytes written before the refusal; want at most %d", name, total, MaxUnpacked)
		}
	}
}
