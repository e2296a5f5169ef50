package zoo

// Only2xx stores an answer only when it is a success, as both libraries of
// issue 27 do: a transfer refused 422 insufficient_funds is worked out
// afresh on every retry, so once money arrives the late retry of a refused
// transfer moves it.
var Only2xx = Member{
	Name:   "only-2xx",
	Class:  "refused, then moved: only successes are stored, so a refusal's retry can become a transfer",
	Defect: Defect{Keep: func(status int) bool { return status < 300 }},
}
