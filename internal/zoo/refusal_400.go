package zoo

// Refusal400 refuses a transfer for want of funds or over the limit with
// 400, a bad request, not the contract's 422 (wrong-answer alone).
var Refusal400 = Member{
	Name:   "refusal-400",
	Class:  "a refused transfer (no funds, over the limit) is answered 400, a bad request, not the contract's 422",
	Defect: Defect{RefusalStatus: 400},
}
