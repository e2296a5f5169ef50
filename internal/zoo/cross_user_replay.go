package zoo

// CrossUserReplay scopes a user's own keys, but looks a key the user has
// not used up under every user and replays a stored answer to the same
// body, as the two libraries of issue 27 do (they bind a key to the body
// alone, and check the owner only when the bodies differ): another user who
// sends the first user's key and exact body is handed the first user's
// stored 201, with its transfer id and the balance of an account they may
// not touch. Any other request of theirs is their own.
var CrossUserReplay = Member{
	Name:   "cross-user-replay",
	Class:  "a stored answer is replayed to another user who sends the same key and body",
	Defect: Defect{ReplayOthers: true},
}
