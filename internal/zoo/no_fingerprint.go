package zoo

// NoFingerprint never binds a key to its request: a key reused for another
// amount or recipient is answered with the first request's transfer, so the
// client believes a transfer happened that never did.
var NoFingerprint = Member{
	Name:   "no-fingerprint",
	Class:  "a key reused for another request is answered with the first one's transfer",
	Defect: Defect{Fingerprint: func(string, []byte, Transfer) string { return "" }},
}
