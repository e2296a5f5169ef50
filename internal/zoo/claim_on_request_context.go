package zoo

// ClaimOnRequestContext gives up a request whose client went away while it
// worked, without releasing its key, as a handler that claims the key and
// then returns on the request's context does: the key answers 409 for ever
// (unresolved alone). It shows on a bank with Work.
var ClaimOnRequestContext = Member{
	Name:   "claim-on-request-context",
	Class:  "a request whose client went away is given up without releasing its key: it answers 409 for ever",
	Defect: Defect{ClaimOnRequestContext: true},
}
