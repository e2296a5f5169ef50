package ha

// WaitCommits is waitCommits, for a test that stalls replication itself.
var WaitCommits = waitCommits
