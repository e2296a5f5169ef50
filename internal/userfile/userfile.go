// Package userfile reads a file a user named on the command line (a
// history for check, a recipe for scenario --recipe): bounded in size and
// in time, and only if it is a regular file. A device (/dev/zero), a FIFO
// or a terminal would otherwise be read for ever, holding memory and
// ignoring Ctrl-C; a file larger than anything bank-sim writes is a
// mistake, not a history.
package userfile

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxSize is the largest file Read accepts by default: 256 MiB. The largest
// file bank-sim writes for these commands is a chaos history, about 800
// bytes per intent under the default faults (seed 1, 2000 intents: 1.6 MB),
// so this holds some 300 000 intents, more than an hour of chaos --duration
// on a laptop; decoding takes about five times the file's size in memory.
const MaxSize = 256 << 20

// chunk is how much is read between two looks at the context.
const chunk = 1 << 20

// Error is a file that cannot be read as the user meant: the message says
// what is wrong and what to give instead.
type Error struct {
	Msg string
	// TooBig: the file is larger than the limit (else it is not a
	// regular file).
	TooBig bool
}

func (e *Error) Error() string { return e.Msg }

// Read reads path, which must be a regular file of at most max bytes
// (MaxSize when max <= 0); what says what the file should be, for the
// message ("a history written by chaos --history"). It stops when ctx ends.
func Read(ctx context.Context, path string, max int64, what string) ([]byte, error) {
	if max <= 0 {
		max = MaxSize
	}
	// O_NONBLOCK: opening a FIFO for reading would wait for a writer.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &Error{Msg: fmt.Sprintf("%s is not a regular file (it is %s); bank-sim reads %s", path, kind(st.Mode()), what)}
	}
	tooBig := &Error{Msg: fmt.Sprintf("%s is larger than %s; bank-sim reads %s, which is never that large", path, size(max), what), TooBig: true}
	if st.Size() > max {
		return nil, tooBig
	}
	// The size may be wrong (a file still growing, or /proc's, which say
	// 0): the read is bounded anyway.
	r := io.LimitReader(f, max+1)
	var b bytes.Buffer
	b.Grow(int(min(st.Size(), 16*chunk)) + 1) // no more up front than a large history needs
	for {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		n, err := b.ReadFrom(io.LimitReader(r, chunk))
		if err != nil {
			return nil, err
		}
		if int64(b.Len()) > max {
			return nil, tooBig
		}
		if n == 0 {
			return b.Bytes(), nil
		}
	}
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "not a plain file"
}

func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
