package zoo

// RetriedRefusal stores a refusal for want of funds but treats it as
// retryable: a retry with its key runs the transfer again, so once money
// arrived a client told "refused" has it moved (refused-then-moved alone).
// It is only-2xx's class without only-2xx's side effects on a busy run
// (refusals re-run unmarked, a refused key free for another request), so
// the target audit can show that rule alone catches it.
var RetriedRefusal = Member{
	Name:   "retried-refusal",
	Class:  "refused, then moved: a refusal for want of funds is retried with its key, so a late retry moves the money",
	Defect: Defect{RetryRefusals: true},
}
