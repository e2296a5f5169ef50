package zoo

// Replay200 answers a replay of a transfer 200, not the stored 201
// (replay-differs alone).
var Replay200 = Member{
	Name:   "replay-200",
	Class:  "a replay is answered 200, not the stored 201",
	Defect: Defect{ReplayStatus: 200},
}
