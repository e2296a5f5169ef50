package zoo

// RawBody binds a key to the request's bytes, as a store that hashes the
// raw body does: the same request from a client that serialises its JSON
// members in another order is refused as key misuse, and the retry of a
// transfer that happened is told it never can.
var RawBody = Member{
	Name:   "raw-body",
	Class:  "the same JSON in other bytes (members reordered) is refused as key misuse",
	Defect: Defect{Fingerprint: func(user string, raw []byte, _ Transfer) string { return user + ":" + string(raw) }},
}
