package zoo

// SharedAnswers finds a key by its text alone and compares the request only
// when the key is the caller's own: another user's own transfer under the
// same key text is told the first user's transfer (chaos --target's
// acknowledged-missing alone sees it).
var SharedAnswers = Member{
	Name:   "shared-answers",
	Class:  "keys shared by all users, the body compared for the key's owner only: another user's own transfer is told the first user's",
	Defect: Defect{Scope: func(_, key string) string { return key }, AnswerOthers: true},
}
