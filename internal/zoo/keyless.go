package zoo

// Keyless makes the key optional, as middlewares that skip requests without
// the header do: a client that forgot it gets a transfer that no retry can
// ever find again.
var Keyless = Member{
	Name:   "keyless",
	Class:  "a request without an Idempotency-Key is accepted as a transfer",
	Defect: Defect{Keyless: true},
}
