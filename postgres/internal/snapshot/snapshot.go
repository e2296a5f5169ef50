// Package snapshot packs a freshly initialised PostgreSQL data directory
// into a gzipped tar and unpacks it again, so that a first run can skip
// initdb, which is most of its time (about 0.9 s of 1.3 s on a 2-core
// machine). PGlite, which the lesson uses, ships its cluster the same way.
//
// The archive is a plain tar (inspect it with `tar tzvf`): a file whose
// bytes equal an earlier file's is stored as a hard link to it, which
// makes the three nearly identical databases of a new cluster cost one.
// Unpack writes such a file as an independent copy, never a link: the
// server rewrites its files in place.
package snapshot

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// InitdbArgs are the arguments bank-sim gives initdb, both for a cluster it
// makes on the spot and for the snapshot: a cluster from either must be the
// same. --no-sync because fsyncing every file is half of initdb's time and
// pointless for a simulator's cluster.
func InitdbArgs(pwfile, dataDir string) []string {
	return []string{"--no-sync", "-A", "password", "-U", "postgres", "--pwfile=" + pwfile,
		"--locale=C", "--encoding=UTF8", "-D", dataDir}
}

// Pack writes dir as a gzipped tar to w, in a stable order, with paths
// relative to dir and duplicate contents stored as hard links.
func Pack(w io.Writer, dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s: only directories and regular files can be packed", p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	first := map[[sha256.Size]byte]string{}
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		h := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), Format: tar.FormatPAX}
		if fi.IsDir() {
			h.Typeflag, h.Name = tar.TypeDir, name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if target, ok := first[sum]; ok {
			h.Typeflag, h.Linkname = tar.TypeLink, target
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		first[sum] = name
		h.Typeflag, h.Size = tar.TypeReg, int64(len(b))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// MaxUnpacked is the most a snapshot may unpack to (files and links' copies
// together).
const MaxUnpacked = 512 << 20

// Unpack writes the archive r into dir, which must not exist yet; it is
// created with mode 0700, as PostgreSQL demands of a data directory. On an
// error dir may be half written: the caller removes it. (Writing the files
// from several goroutines was tried: on 2 cores it was slower, the cost
// being the kernel's work per file created.)
func Unpack(r io.Reader, dir string) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("snapshot: %v", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return readEntries(zr, dir, writeFile)
}

// readEntries reads the archive, makes its directories (they come before
// their contents) and hands every file, a link's as a copy of its target's
// bytes, to write.
func readEntries(zr io.Reader, dir string, write func(dst string, mode fs.FileMode, body []byte) error) error {
	tr := tar.NewReader(zr)
	bodies := map[string][]byte{}
	// left bounds what the archive may unpack to, counting a link's copy as
	// a file: a pristine cluster is tens of megabytes, and a user may name
	// any file as a snapshot.
	left := int64(MaxUnpacked)
	take := func(name string, n int64) error {
		if left -= n; left < 0 {
			return fmt.Errorf("snapshot: %s takes it past %d MiB unpacked; a new cluster's snapshot is far smaller: name one made by mksnapshot", name, MaxUnpacked>>20)
		}
		return nil
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot: %v", err)
		}
		dst, err := inside(dir, h.Name)
		if err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(dst, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := take(h.Name, h.Size); err != nil {
				return err
			}
			body, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return fmt.Errorf("snapshot: %s: %v", h.Name, err)
			}
			bodies[path.Clean(h.Name)] = body
			if err := write(dst, mode, body); err != nil {
				return err
			}
		case tar.TypeLink:
			if _, err := inside(dir, h.Linkname); err != nil {
				return err
			}
			body, ok := bodies[path.Clean(h.Linkname)]
			if !ok {
				return fmt.Errorf("snapshot: %s copies %s, which comes later or not at all", h.Name, h.Linkname)
			}
			if err := take(h.Name, int64(len(body))); err != nil {
				return err
			}
			if err := write(dst, mode, body); err != nil {
				return err
			}
		default:
			return fmt.Errorf("snapshot: %s has type %q; only directories, files and links are expected", h.Name, h.Typeflag)
		}
	}
}

// inside joins name to dir, refusing a name that would leave dir.
func inside(dir, name string) (string, error) {
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	if clean == "." || path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("snapshot: entry %q is outside the data directory", name)
	}
	return filepath.Join(dir, filepath.FromSlash(clean)), nil
}

// page is the unit in which writeFile looks for zeros: PostgreSQL's block
// and WAL page size, and a multiple of the file system's block.
const page = 8 << 10

// writeFile writes body to a new file dst, leaving every run of all-zero
// pages a hole (skipped, then the file truncated to its full length): it
// reads back as the same zeros without the file system writing them. Most
// of a new cluster's WAL segment is zeros, as are some SLRU files, and
// PostgreSQL makes WAL segments the same way itself when wal_init_zero is
// off.
func writeFile(dst string, mode fs.FileMode, body []byte) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode|0o600)
	if err != nil {
		return err
	}
	for off := 0; off < len(body); {
		end := min(off+page, len(body))
		if allZero(body[off:end]) {
			off = end
			continue
		}
		// Write the run of pages that are not all zeros in one call.
		for end < len(body) && !allZero(body[end:min(end+page, len(body))]) {
			end = min(end+page, len(body))
		}
		if _, err := f.WriteAt(body[off:end], int64(off)); err != nil {
			f.Close()
			return err
		}
		off = end
	}
	if err := f.Truncate(int64(len(body))); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

var zeroPage [page]byte

func allZero(b []byte) bool { return bytes.Equal(b, zeroPage[:len(b)]) }
