package probe

import "testing"

// The verdict of a run with checks that could not be made says which, in
// plain words that agree with their number.
func TestVerdictNamesTheChecksNotMade(t *testing.T) {
	for _, tt := range []struct {
		statuses map[string]Status
		want     string
	}{
		{map[string]Status{"replay": Pass, "other-copy": Skipped, "storm": Pass},
			"PASS on what could be checked: 2 of 3 checks passed; the other-copy check could not be made, so this run says nothing about it"},
		{map[string]Status{"replay": Pass, "other-copy": Skipped, "hang-up": Unknown},
			"PASS on what could be checked: 1 of 3 checks passed; 2 checks (other-copy, hang-up) could not be made, so this run says nothing about them"},
	} {
		var r Report
		for _, name := range []string{"replay", "other-copy", "storm", "hang-up"} {
			if st, ok := tt.statuses[name]; ok {
				r.Checks = append(r.Checks, Result{Name: name, Status: st})
			}
		}
		r.tally()
		if r.Verdict != tt.want {
			t.Errorf("verdict\n %q\nwant\n %q", r.Verdict, tt.want)
		}
	}
}
