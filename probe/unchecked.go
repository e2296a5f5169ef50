package probe

// Unchecked is a class of defect a run could not check on its target, why,
// and the flag that would check it. Every report of probe and chaos
// --target lists them: a PASS says nothing about what was never tried
// (issue 27: keys lost at a restart, a server error stored as a key's
// answer, went unseen and unsaid).
type Unchecked struct {
	What string `json:"what"`
	Flag string `json:"flag"`
	Why  string `json:"why"`
}

// The flags that make a class checkable, as both commands name them.
const (
	FlagRestart = "restart"
	FlagDBProxy = "db-proxy"
)

// Outside lists what a run against urls target copies cannot check from
// outside unless a flag makes it checkable: given holds the names of those
// flags the command line gave (FlagRestart, FlagDBProxy); second is how
// the command takes a second copy's URL ("a second URL", "a second
// --target URL").
func Outside(urls int, second string, given []string) []Unchecked {
	has := func(flag string) bool {
		for _, g := range given {
			if g == flag {
				return true
			}
		}
		return false
	}
	var out []Unchecked
	if !has(FlagRestart) {
		out = append(out, Unchecked{"keys lost at a restart", "--restart CMD",
			"a key store in the server's memory forgets every key when the server is redeployed or crashes, and the retry after it moves the money again; " +
				"bank-sim cannot restart a server it does not own unless told how (--restart 'docker restart api', with --wait-for)"})
	}
	if !has(FlagDBProxy) {
		out = append(out, Unchecked{"database failures", "--db-proxy LISTEN=UPSTREAM",
			"a transient database failure stored as the key's final answer (a 5xx replayed to every retry, or 409 for as long as the key's lock), " +
				"or a commit whose answer is lost: bank-sim cannot make the target's database fail unless the target reaches it through bank-sim's fault proxy (point its database URL at LISTEN)"})
	}
	if urls < 2 {
		out = append(out, Unchecked{"a second copy", second,
			"whether copies of the service share their keys (a retry that a load balancer sends to another copy): one URL was given; give a second copy's URL, sharing the database"})
	}
	return out
}

// closedUnchecked is the refusal's other case, which only probe can be
// told how to make: the contract has no way to close and reopen an account.
var closedUnchecked = Unchecked{"a refusal for a closed recipient, retried after it reopened", "--closed-account ID --reopen-cmd CMD",
	"a store that keeps only its successes turns the refusal of a transfer to a closed account into a transfer once the account reopens; " +
		"bank-sim cannot close or reopen an account unless told which one is closed and how to reopen it"}
