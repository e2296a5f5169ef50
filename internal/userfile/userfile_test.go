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
