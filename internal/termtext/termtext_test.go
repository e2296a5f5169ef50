package termtext

import (
	"bytes"
	"encoding/json"
	"github.com/fatih/color"
	"strings"
	"testing"
)

const hostile = "boom\x1b]0;X\x07\x1b[2J\rfake: PASS\x7f\u0085\x9b\nnext"

func TestEscapeLeavesNoControlByte(t *testing.T) {
	got := Escape(hostile)
	if i := strings.IndexFunc(got, func(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0xfffd }); i >= 0 {
		t.Fatalf("Escape(%q) = %q: a control character at %d", hostile, got, i)
	}
	want := `boom\x1b]0;X\a\x1b[2J\rfake: PASS\u007f\u0085\x9b\nnext`
	if got != want {
		t.Fatalf("Escape(%q)\n = %s\nwant %s", hostile, got, want)
	}
	if Escape("plain · text ₦") != "plain · text ₦" {
		t.Fatal("Escape changed printable text")
	}
}

func TestWriterPassesNewlinesAndColourOnly(t *testing.T) {
	for _, colour := range []bool{false, true} {
		var out bytes.Buffer
		w := NewWriter(&out, func() bool { return colour })
		line := "\x1b[31mFAIL\x1b[0m\t" + hostile + "\n"
		if n, err := w.Write([]byte(line)); err != nil || n != len(line) {
			t.Fatalf("Write: %d, %v; want %d, nil", n, err, len(line))
		}
		got := out.String()
		esc := strings.Count(got, "\x1b")
		if wantEsc := map[bool]int{false: 0, true: 2}[colour]; esc != wantEsc {
			t.Errorf("colour %v: %d raw ESC reached the writer, want %d (bank-sim's own colour only): %q", colour, esc, wantEsc, got)
		}
		if strings.ContainsAny(got, "\r\a\x7f\u0085") || strings.Count(got, "\n") != 2 || strings.Count(got, "\t") != 1 {
			t.Errorf("colour %v: %q", colour, got)
		}
	}
}

// With colour on, only bank-sim's own palette passes: a target's
// conceal, reverse video or background (which hide text or dress it as
// bank-sim's) is escaped.
func TestWriterPassesOnlyThePalette(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out, func() bool { return true })
	own := color.New(color.FgRed, color.Bold)
	own.EnableColor()
	for _, s := range []string{own.Sprint("FAIL"), color.New(color.Faint).Add(color.Reset).Sprint("x"), "\x1b[36;1mhead\x1b[0m"} {
		out.Reset()
		w.Write([]byte(s))
		if out.String() != s {
			t.Errorf("bank-sim's own colour %q came out %q", s, out.String())
		}
	}
	for _, s := range []string{"\x1b[8mhidden", "\x1b[7mPASS", "\x1b[30;40mx", "\x1b[38;5;2mPASS", "\x1b[1;8mx", "\x1b[mx"} {
		out.Reset()
		w.Write([]byte(s))
		if strings.ContainsRune(out.String(), 0x1b) {
			t.Errorf("%q passed: %q", s, out.String())
		}
	}
}

// JSON's own escapes survive, and DEL and C1 (which encoding/json
// leaves raw) are escaped in a form JSON reads back as the same text.
func TestWriterKeepsJSONValid(t *testing.T) {
	doc, _ := json.Marshal(map[string]string{"error": hostile})
	var out bytes.Buffer
	NewWriter(&out, nil).Write(append(doc, '\n'))
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("not JSON after the Writer: %v\n%s", err, out.String())
	}
	if want := strings.ToValidUTF8(hostile, "\ufffd"); back["error"] != want {
		t.Fatalf("read back %q, want %q", back["error"], want)
	}
}
