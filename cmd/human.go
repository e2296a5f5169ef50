package cmd

import (
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/banksim/bank-sim/scenarios"
)

// Output meant to be read is shortened where the full value helps nobody:
// random keys and lock ids to their first 8 characters, intents to their
// people's names, durations rounded. --json keeps every value whole.

var (
	uuidRe = regexp.MustCompile(`\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)
	lockRe = regexp.MustCompile(`\block-([0-9a-f]{8})[0-9a-f]{8}\b`)
)

// shortIDs shortens random keys and lock ids: "5a758367…", "lock-3081957f…".
func shortIDs(s string) string {
	s = uuidRe.ReplaceAllString(s, "$1…")
	return lockRe.ReplaceAllString(s, "lock-$1…")
}

// humanizer rewrites text for people: short ids and, for a phase, its
// intents' names.
type humanizer struct {
	labels *strings.Replacer
}

func newHumanizer(labels map[string]string) humanizer {
	if len(labels) == 0 {
		return humanizer{}
	}
	// Longer labels first, so that "ada-race-1-10" is not read as
	// "ada-race-1-1" followed by "0".
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) > len(keys[j])
		}
		return keys[i] < keys[j]
	})
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k, labels[k])
	}
	return humanizer{labels: strings.NewReplacer(pairs...)}
}

func (h humanizer) text(s string) string {
	if h.labels != nil {
		s = h.labels.Replace(s)
	}
	return shortIDs(s)
}

// humanDuration is a duration rounded for people: "0.4 s", "12 ms".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond)/time.Millisecond)
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return scenarios.Dur(d.Round(time.Second))
}

// width is the number of columns s takes, for the runes bank-sim prints
// (all one column wide).
func width(s string) int { return utf8.RuneCountInString(s) }

// wrap breaks text into lines of at most max columns at spaces; a word
// longer than max is cut. max <= 0 means no limit.
func wrap(text string, max int) []string {
	if max <= 0 || width(text) <= max {
		return []string{text}
	}
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		for width(word) > max {
			if line != "" {
				lines = append(lines, line)
				line = ""
			}
			r := []rune(word)
			lines = append(lines, string(r[:max]))
			word = string(r[max:])
		}
		switch {
		case line == "":
			line = word
		case width(line)+1+width(word) <= max:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// pad pads s with spaces to n columns.
func pad(s string, n int) string {
	if w := width(s); w < n {
		return s + strings.Repeat(" ", n-w)
	}
	return s
}

// truncate cuts s to n columns, ending in "…" when it cut.
func truncate(s string, n int) string {
	if width(s) <= n {
		return s
	}
	if n <= 1 {
		return string([]rune(s)[:max(n, 0)])
	}
	return string([]rune(s)[:n-1]) + "…"
}

// printWrapped prints text wrapped to width (not at all when width is 0),
// its continuation lines indented by two spaces.
func printWrapped(w io.Writer, text string, cols int, style colorer) {
	lines := wrap(text, cols)
	for i, l := range lines {
		if i == 0 {
			fmt.Fprintln(w, style.Sprint(l))
			continue
		}
		// The rest again, within the indent.
		for _, m := range wrap(strings.Join(lines[i:], " "), max(cols-2, 20)) {
			fmt.Fprintln(w, style.Sprint("  "+m))
		}
		break
	}
}
