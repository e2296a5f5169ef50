package chaos

import (
	"net/http"
	"testing"

	"github.com/banksim/bank-sim/faults"
	"github.com/banksim/bank-sim/probe"
)

// The copies of a duplicated request show the defence the contract asks
// for when one was answered 409, or when all were given one transfer (the
// second waited for the first); copies given two transfers, or a copy with
// no answer, show none.
func TestCopiesAnsweredCountTheDefenceTheyShow(t *testing.T) {
	receipt := func(id string) *faults.CopyAnswer {
		return &faults.CopyAnswer{Status: 201, Header: http.Header{}, Body: []byte(`{"transferId":` + id + `}`)}
	}
	conflict := &faults.CopyAnswer{Status: 409, Header: http.Header{}, Body: []byte(`{"code":"request_in_progress"}`)}
	refusal := &faults.CopyAnswer{Status: 422, Header: http.Header{}, Body: []byte(`{"code":"insufficient_funds"}`)}
	cases := []struct {
		name    string
		answers []*faults.CopyAnswer
		want    string // the path counted, "" for none
	}{
		{"one 409", []*faults.CopyAnswer{receipt("7"), conflict}, PathConflict},
		{"the first's transfer, after a wait", []*faults.CopyAnswer{receipt("7"), receipt("7")}, PathWaited},
		{"two transfers", []*faults.CopyAnswer{receipt("7"), receipt("8")}, ""},
		{"a copy with no answer", []*faults.CopyAnswer{receipt("7"), nil}, ""},
		{"two refusals", []*faults.CopyAnswer{refusal, refusal}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &engine{server: map[string]int{}}
			target := &Target{Contract: probe.LessonContract()}
			target.copiesAnswered(e)(tc.answers)
			var got []string
			for p, n := range e.server {
				if n > 0 {
					got = append(got, p)
				}
			}
			if tc.want == "" && len(got) > 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
				t.Errorf("counted %v, want %q", got, tc.want)
			}
		})
	}
}
