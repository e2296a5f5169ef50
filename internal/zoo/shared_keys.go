package zoo

// SharedKeys finds a key by its text alone, as a store keyed by the
// Idempotency-Key header and nothing else does (the default of several Node
// and Python middlewares): another user who happens to pick the same key
// text has their own transfer refused as a reused key (the key stays bound
// to the first user's request, user included, so nothing is replayed).
var SharedKeys = Member{
	Name:   "shared-keys",
	Class:  "keys shared by all users: another user's own transfer with the same key text is refused",
	Defect: Defect{Scope: func(_, key string) string { return key }},
}
