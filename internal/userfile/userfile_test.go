package userfile_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/banksim/bank-sim/internal/userfile"
)

// A device, a FIFO with no writer and a directory are refused at once, by
// what they are; a file over the limit by its size, before a byte is read.
func TestOnlyARegularFileUpToTheLimitIsRead(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, userfile.MaxSize+1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small.json")
	if err := os.WriteFile(small, []byte(`{"seed":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/dev/zero", "/dev/zero is not a regular file (it is a character device); bank-sim reads a history"},
		{fifo, "is not a regular file (it is a named pipe)"},
		{dir, "is not a regular file (it is a directory)"},
		{big, "big.json is larger than 256 MiB; bank-sim reads a history"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := userfile.Read(context.Background(), tc.path, 0, "a history")
			done <- err
		}()
		select {
		case err := <-done:
			var ue *userfile.Error
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want a userfile.Error saying %q", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("reading %s did not return within 10 s: it hung", tc.path)
		}
	}
	// A file over a smaller limit, read to find out (its size said less).
	if _, err := userfile.Read(context.Background(), small, 5, "a history"); err == nil || !strings.Contains(err.Error(), "larger than 5 bytes") {
		t.Errorf("10 bytes over a limit of 5: %v", err)
	}
	if b, err := userfile.Read(context.Background(), small, 0, "a history"); err != nil || string(b) != `{"seed":1}` {
		t.Errorf("a small history: %q, %v", b, err)
	}
}

// countdown is a context cancelled after its Err has been asked n times:
// a cancellation in the middle of a read, at a point the test chooses.
type countdown struct {
	context.Context
	n atomic.Int64
}

func (c *countdown) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// A long read stops at the next chunk once its context ends: an
// interrupt does not wait for 255 MiB.
func TestAReadStopsWhenItsContextEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.json")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, userfile.MaxSize-1); err != nil {
		t.Fatal(err)
	}
	ctx := &countdown{Context: context.Background()}
	ctx.n.Store(3)
	_, err := userfile.Read(ctx, path, 0, "a history")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a read cancelled after its third chunk: %v, want context.Canceled", err)
	}
}

// grower is a context whose first Err, asked before the first chunk is
// read, appends extra bytes to a file: a file that grows after its size
// was taken at open.
type grower struct {
	context.Context
	path  string
	extra int
	once  atomic.Bool
	err   error
}

func (g *grower) Err() error {
	if g.once.CompareAndSwap(false, true) {
		f, err := os.OpenFile(g.path, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write(make([]byte, g.extra))
			err = errors.Join(err, f.Close())
		}
		g.err = err
	}
	return nil
}

// Issue 30, kind 10: the cap is on the bytes read, not on the size the file
// reported at open. A file of 10 bytes at open that grows past the limit
// while it is read is refused as too large, not read whole nor cut short;
// a /proc file, whose size says 0, is read whole under the limit and
// refused over it.
func TestTheLimitIsOnTheBytesReadNotTheSizeAtOpen(t *testing.T) {
	const max = 3 << 20
	path := filepath.Join(t.TempDir(), "growing.json")
	if err := os.WriteFile(path, []byte(`{"seed":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &grower{Context: context.Background(), path: path, extra: max}
	b, err := userfile.Read(g, path, max, "a history")
	if g.err != nil {
		t.Fatalf("growing the file: %v", g.err)
	}
	var ue *userfile.Error
	if !errors.As(err, &ue) || !ue.TooBig {
		t.Errorf("a file of 10 bytes at open that grew to %d while read, limit %d: %d bytes, %v; want a userfile.Error saying it is too large", max+10, max, len(b), err)
	}

	const proc = "/proc/self/status"
	st, err := os.Stat(proc)
	if err != nil || st.Size() != 0 {
		t.Skipf("%s: size %v, %v; this test needs a file whose size says 0", proc, st, err)
	}
	b, err = userfile.Read(context.Background(), proc, 0, "a status")
	if err != nil || len(b) < 100 || !strings.Contains(string(b), "Name:") {
		t.Fatalf("%s under the limit: %d bytes, %v; want it whole (more than 100 bytes, with Name:)", proc, len(b), err)
	}
	b, err = userfile.Read(context.Background(), proc, 64, "a status")
	if !errors.As(err, &ue) || !ue.TooBig || !strings.Contains(err.Error(), "larger than 64 bytes") {
		t.Errorf("%s over a limit of 64 bytes: %d bytes, %v; want a userfile.Error saying it is larger than 64 bytes", proc, len(b), err)
	}
}
