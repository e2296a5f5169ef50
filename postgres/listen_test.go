package postgres

import (
	"strings"
	"testing"
)

// Listen addresses and client networks reach postgres' command line and
// pg_hba.conf: only plain IPs and CIDRs get through, with a sentence.
func TestCheckListenRefusesWhatIsNotAnAddress(t *testing.T) {
	t.Parallel()
	if err := checkListen([]string{"169.254.9.1"}, []string{"169.254.9.0/24"}); err != nil {
		t.Fatalf("good addresses refused: %v", err)
	}
	for _, c := range []struct{ addrs, clients []string }{
		{[]string{"*"}, nil},
		{[]string{"169.254.9.1,0.0.0.0"}, nil},
		{nil, []string{"all"}},
		{nil, []string{"169.254.9.0/24 trust\nhost all all 0.0.0.0/0"}},
	} {
		err := checkListen(c.addrs, c.clients)
		if err == nil || !strings.Contains(err.Error(), "is not") {
			t.Errorf("%q %q: %v, want a refusal", c.addrs, c.clients, err)
		}
	}
}
