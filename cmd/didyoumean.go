package cmd

import (
	"fmt"
	"strings"
)

// unknownName says what is wrong with a name that is none of names (a
// story, a bug): the closest ones when it looks like a slip of the
// keyboard ("did you mean lost-response?"), where a list of all of them
// would bury the one meant; every name when nothing is close. list is the
// command that names them all.
func unknownName(kind, name string, names []string, list string) error {
	if close := closest(name, names); len(close) > 0 {
		return fmt.Errorf("unknown %s %q; did you mean %s? ('%s' names all %d)", kind, name, orList(close), list, len(names))
	}
	return fmt.Errorf("unknown %s %q; valid names: %s", kind, name, strings.Join(names, ", "))
}

// closest are the names nearest to name by edit distance, when they are
// near enough to be what was meant: at most a third of name's letters
// wrong (and at most 3), or name the start of them.
func closest(name string, names []string) []string {
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return nil
	}
	limit := min(3, max(1, len([]rune(name))/3))
	best, out := limit+1, []string(nil)
	for _, n := range names {
		d := editDistance(name, n)
		if strings.HasPrefix(n, name) && len(name) >= 3 {
			d = min(d, limit) // "crash" for crash-takeover
		}
		switch {
		case d < best:
			best, out = d, []string{n}
		case d == best:
			out = append(out, n)
		}
	}
	if len(out) > 3 {
		return nil // too many to be a slip: the full list says more
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// orList is "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprintf("%s or %s", strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}
