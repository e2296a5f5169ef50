// Package termtext keeps text that came from outside bank-sim (a target's
// answers, a history file, a shard) from driving the user's terminal.
//
// A terminal obeys the bytes it is given: ESC starts a sequence that can
// set the window's title, write the clipboard (OSC 52) or clear the
// screen, BEL rings, CR returns to the start of the line so that a
// "FAIL" can be overwritten with "PASS". Escape writes each such byte as
// a visible escape instead; Writer does the same for everything written
// through it, so no command has to remember where outside text goes.
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every control character written as a visible
// escape: C0 (newline included: outside text has no say in bank-sim's
// lines), DEL, C1, and bytes that are not UTF-8 (a lone 0x9b is CSI on
// a terminal that is not in UTF-8 mode). The escapes of DEL and C1 are
// JSON's own form (\u007f), so a JSON text stays JSON.
func Escape(s string) string {
	if clean(s, false) {
		return s
	}
	var b strings.Builder
	write(&b, s, false)
	return b.String()
}

// clean reports whether s has nothing to escape; layout lets \n and
// \t be (a tab moves the cursor on, it cannot write over anything).
func clean(s string, layout bool) bool {
	wide := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 && !(layout && (c == '\n' || c == '\t')) || c == 0x7f {
			return false
		}
		wide = wide || c >= 0x80
	}
	return !wide || plainRunes(s)
}

// plainRunes reports whether s is valid UTF-8 without C1 (C0 and DEL
// are checked by the caller). A U+FFFD written out is escaped too, which
// does no harm.
func plainRunes(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || r >= 0x80 && r <= 0x9f {
			return false
		}
	}
	return true
}

func write(b *strings.Builder, s string, layout bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(b, `\x%02x`, s[i])
		case (r == '\n' || r == '\t') && layout:
			b.WriteByte(byte(r))
		case r < 0x20:
			b.WriteString(c0(byte(r)))
		case r >= 0x7f && r <= 0x9f:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

func c0(c byte) string {
	switch c {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\t':
		return `\t`
	case '\n':
		return `\n`
	case '\v':
		return `\v`
	case '\f':
		return `\f`
	case '\r':
		return `\r`
	}
	return fmt.Sprintf(`\x%02x`, c)
}

// Writer escapes what is written through it as Escape does, except for
// newlines, tabs (shell completion and tab-separated lists need them)
// and, while Colour says so, the colour sequences (ESC [
// parameters m) that bank-sim's own palette writes, and no others. Those
// are the only control bytes bank-sim's output needs; its progress bars
// and prompts, which redraw a line, write to Raw(w) on purpose.
//
// Outside text printed through a Writer keeps its newlines; where a
// line's meaning depends on outside text staying on it, escape that
// text with Escape first.
type Writer struct {
	w io.Writer
	// Colour reports whether colour sequences may pass; nil means never.
	Colour func() bool
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer, colour func() bool) *Writer {
	return &Writer{w: w, Colour: colour}
}

// Write writes p escaped. It reports len(p) when all of it was written,
// whatever the length of its escaped form.
func (w *Writer) Write(p []byte) (int, error) {
	s := string(p)
	if clean(s, true) {
		return w.w.Write(p)
	}
	colour := w.Colour != nil && w.Colour()
	var b strings.Builder
	for len(s) > 0 {
		i := strings.IndexByte(s, 0x1b)
		if i < 0 {
			write(&b, s, true)
			break
		}
		write(&b, s[:i], true)
		if n := sgr(s[i:]); colour && n > 0 {
			b.WriteString(s[i : i+n])
			s = s[i+n:]
			continue
		}
		b.WriteString(`\x1b`)
		s = s[i+1:]
	}
	if _, err := io.WriteString(w.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// palette are the SGR parameters bank-sim's own colours write (and
// their resets): bold, faint, red, green, yellow, cyan. Any other (8,
// conceal; 7, reverse; 40–47, a background; 38;5;n) could hide text or
// dress a target's words as bank-sim's, so it is escaped even with
// colour on.
var palette = map[string]bool{"0": true, "1": true, "2": true, "22": true, "31": true, "32": true, "33": true, "36": true, "39": true}

// sgr returns the length of the colour sequence s starts with, or 0 when
// it is not one or asks for more than the palette.
func sgr(s string) int {
	if len(s) < 3 || s[0] != 0x1b || s[1] != '[' {
		return 0
	}
	for i := 2; i < len(s) && i < 32; i++ {
		switch c := s[i]; {
		case c == 'm':
			for _, p := range strings.Split(s[2:i], ";") {
				if !palette[p] {
					return 0
				}
			}
			return i + 1
		case c == ';' || c >= '0' && c <= '9':
		default:
			return 0
		}
	}
	return 0
}

// Raw returns the writer under w when w is a Writer, for the few writes
// that must drive the terminal (a progress bar's carriage return, a
// prompt erased); any other writer is returned as it is.
func Raw(w io.Writer) io.Writer {
	if t, ok := w.(*Writer); ok {
		return t.w
	}
	return w
}
