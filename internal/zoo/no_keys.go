package zoo

// NoKeys has no idempotency at all: the key is read and never looked up, so
// a retry after a lost answer is a second transfer. What an API without a
// key store does; the class every other one refines.
var NoKeys = Member{
	Name:   "no-keys",
	Class:  "no idempotency: every retry is a new transfer",
	Defect: Defect{IgnoreKeys: true},
}
