package zoo

// AnswerOnRequestContext stores the answer with the request's context: when
// the client went away, the transfer stays and its key is released, so the
// retry makes a second transfer nobody was told of (balance-ledger-differs
// alone). It shows on a bank with Work.
var AnswerOnRequestContext = Member{
	Name:   "answer-on-request-context",
	Class:  "the answer is stored with the request's context: when the client went away, the transfer stays and its key is released, so the retry pays again",
	Defect: Defect{AnswerOnRequestContext: true},
}
