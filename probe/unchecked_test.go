package probe_test

import (
	"strings"
	"testing"

	"github.com/banksim/bank-sim/probe"
)

// What a run cannot check is listed with the flag that would check it, and
// a flag given takes its class off the list.
func TestOutsideNamesTheFlagThatWouldCheckIt(t *testing.T) {
	flags := func(us []probe.Unchecked) string {
		var s []string
		for _, u := range us {
			s = append(s, u.Flag)
		}
		return strings.Join(s, " | ")
	}
	cases := []struct {
		urls  int
		given []string
		want  string
	}{
		{1, nil, "--restart CMD | --db-proxy LISTEN=UPSTREAM | a second URL"},
		{2, nil, "--restart CMD | --db-proxy LISTEN=UPSTREAM"},
		{1, []string{probe.FlagRestart}, "--db-proxy LISTEN=UPSTREAM | a second URL"},
		{2, []string{probe.FlagRestart, probe.FlagDBProxy}, ""},
	}
	for _, tc := range cases {
		if got := flags(probe.Outside(tc.urls, "a second URL", tc.given)); got != tc.want {
			t.Errorf("%d URL(s), given %v: %q, want %q", tc.urls, tc.given, got, tc.want)
		}
	}
}
