package cmd

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// termWidth is the width of the terminal on f, or 0 when f is not one.
func termWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0
	}
	return int(ws.Col)
}

// columnsEnv is $COLUMNS, when it is a sensible width.
func columnsEnv(getenv func(string) string) int {
	n, err := strconv.Atoi(getenv("COLUMNS"))
	if err != nil || n < 20 || n > 1000 {
		return 0
	}
	return n
}

// singleKeys switches the terminal on f to single keys without echo, for
// --step: a key acts at once, and q needs no Enter. Signals stay on, so
// Ctrl-C still interrupts. It returns the function that restores the
// terminal, or ok false when f is not a terminal.
func singleKeys(f *os.File) (restore func(), ok bool) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return func() {}, false
	}
	t := *old
	t.Lflag &^= unix.ICANON | unix.ECHO
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &t); err != nil {
		return func() {}, false
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, true
}
