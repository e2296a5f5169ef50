package zoo

// MemoryKeys keeps its keys in the process's memory (a Map, an LRU), as
// in-memory stores do: a restart forgets every key, and a second copy of
// the server behind a load balancer never saw the first one's, so a retry
// after either moves the money again.
var MemoryKeys = Member{
	Name:   "memory-keys",
	Class:  "keys in process memory: lost on a restart, not shared by a second copy",
	Defect: Defect{InMemory: true},
}
