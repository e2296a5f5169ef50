package scenarios_test

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/banksim/bank-sim/bank"
	"github.com/banksim/bank-sim/scenarios"
)

func TestParseFault(t *testing.T) {
	for in, want := range map[string]scenarios.FaultSpec{
		"lose-response":          {Name: "lose-response"},
		"lose-response@2":        {Name: "lose-response", Attempts: []int{2}},
		"crash-after-commit@1,3": {Name: "crash-after-commit", Attempts: []int{1, 3}},
		"tunnel@1":               {Name: "tunnel", Attempts: []int{1}},
	} {
		got, err := scenarios.ParseFault(in)
		if err != nil || got.Name != want.Name || !slices.Equal(got.Attempts, want.Attempts) || got.String() != in {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"nosuch":           `unknown fault "nosuch"`,
		"lose-response@0":  `"0" is not an attempt number`,
		"lose-response@x":  `"x" is not an attempt number`,
		"lose-response@1,": `"" is not an attempt number`,
	} {
		if _, err := scenarios.ParseFault(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseFault(%q): %v, want an error saying %s", in, err, why)
		}
	}
}

// List follows the lesson's order, then the article's, then bank-sim's own
// stories by name; every story has its teaching material.
func TestListFollowsTheLesson(t *testing.T) {
	names := scenarios.Names()
	if names[0] != "partial-failure" || names[1] != "rules" {
		t.Errorf("the lesson starts with partial failure and the rules: %v", names)
	}
	group := func(s scenarios.Scenario) int {
		switch {
		case s.FromLesson():
			return 0
		case s.FromArticle():
			return 1
		}
		return 2
	}
	last := 0
	for _, s := range scenarios.List() {
		if g := group(s); g < last {
			t.Errorf("%s (group %d) comes after a story of group %d: %v", s.Name, g, last, names)
		} else {
			last = g
		}
		if !s.Own() && s.Order == 0 {
			t.Errorf("%s follows the lesson or the article but has no Order", s.Name)
		}
		if s.Title == "" {
			t.Errorf("%s has no title", s.Name)
		}
		e := s.Explain
		if e.Shows == "" || e.Breaks == "" || e.Defence == "" || e.SQL == "" {
			t.Errorf("%s has no full explanation (shows, breaks, defence, SQL)", s.Name)
		}
		for _, l := range strings.Split(e.SQL, "\n") {
			if n := utf8.RuneCountInString(l); n > 78 {
				t.Errorf("%s: an SQL line of %d columns (at most 78): %s", s.Name, n, l)
			}
		}
	}
}

func TestHumanIntent(t *testing.T) {
	if got := scenarios.HumanIntent(1, bank.TransferRequest{From: 1, To: 2, AmountKobo: 1_000_000}); got != "Ada's ₦10,000 to Bola" {
		t.Errorf("got %q", got)
	}
	if got := scenarios.HumanIntent(1, bank.TransferRequest{From: 1, To: 99, AmountKobo: 100}); got != "Ada's ₦1 to account 99" {
		t.Errorf("got %q", got)
	}
}
