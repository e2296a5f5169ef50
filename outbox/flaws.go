package outbox

// Flaws switches on the known mistakes of side effects, each one branch next
// to the line it corrupts. The zero value is the correct code. mistakes.Bug
// carries one, so that --bug and the audit reach these as they reach the
// key store's.
type Flaws struct {
	// SMSInTransaction sends the SMS from inside the transfer's
	// transaction: a commit that then fails cannot call it back.
	SMSInTransaction bool `json:"smsInTransaction,omitempty"`
	// SMSAfterCommit sends the SMS after the commit, with nothing recorded:
	// a server that dies in between never sends it.
	SMSAfterCommit bool `json:"smsAfterCommit,omitempty"`
	// SMSBeforeChecks writes the SMS row as the request comes in, before
	// the transfer's checks, so that a refusal's transaction, which
	// commits with the key's stored answer, commits it too: "You sent
	// ₦10,000 to Bola" for a transfer that never happened (Effects.Refused
	// models it; transfer_id 0, as the request has no transfer).
	SMSBeforeChecks bool `json:"smsBeforeChecks,omitempty"`
	// SMSPerOwnedAccount writes the SMS row with INSERT … SELECT over the
	// transfer's two accounts, kept to those the sender owns: one row
	// while the recipient is someone else, two for a move between the
	// sender's own accounts, and two SMS for one transfer.
	SMSPerOwnedAccount bool `json:"smsPerOwnedAccount,omitempty"`
	// PublishInTransaction publishes the event from inside the transaction
	// (the dual write): a rollback leaves an event for nothing.
	PublishInTransaction bool `json:"publishInTransaction,omitempty"`
	// PublishAfterCommit publishes after the commit: a crash in between
	// loses the event.
	PublishAfterCommit bool `json:"publishAfterCommit,omitempty"`
	// NoEventForOwnAccounts writes no event outbox row for a transfer
	// between two accounts of one user, as if no other service cared about
	// a customer moving money between their own accounts: the services
	// that follow the transfers topic never hear of it.
	NoEventForOwnAccounts bool `json:"noEventForOwnAccounts,omitempty"`
	// NoProviderKey sends without the outbox row's id as the provider's
	// idempotency key: a dispatcher that sent and died before marking sends
	// a second SMS.
	NoProviderKey bool `json:"noProviderKey,omitempty"`
	// NoSkipLocked claims a batch without FOR UPDATE SKIP LOCKED: two
	// dispatchers read the same pending rows and both claim them.
	NoSkipLocked bool `json:"noSkipLocked,omitempty"`
	// NoLeaseCheck claims the ready rows without checking their lease,
	// trusting FOR UPDATE SKIP LOCKED alone: the row locks last only as
	// long as the claim's short transaction, so the next poll claims rows
	// another dispatcher claimed a moment ago and is still sending.
	NoLeaseCheck bool `json:"noLeaseCheck,omitempty"`
	// NoClaimToken renews and marks a row without checking the claim token:
	// a dispatcher whose lease expired carries on with rows another took over.
	NoClaimToken bool `json:"noClaimToken,omitempty"`
	// GiveUpOnSameError fails a row for good at once when its send fails
	// with the same error as the row's last failed send, taking a failure
	// that repeats for a permanent one (a poison row), instead of only
	// after MaxAttempts failed sends: a provider timeout is transient and
	// repeats all the same, and a row whose send and re-send both lose the
	// provider's answer is given up at its second failed send, its SMS
	// sent. Plausible: "the same error twice is not transient" is a common
	// shortcut of retry code, and last_error sits in the very row.
	GiveUpOnSameError bool `json:"giveUpOnSameError,omitempty"`
	// NoDedup makes the consumer apply every delivery, without the
	// processed-events marker.
	NoDedup bool `json:"noDedup,omitempty"`
	// MarkerAfterEffect checks the processed-events marker, commits the
	// effect, and then commits the marker in a transaction of its own: a
	// consumer that dies between the two commits is redelivered an event
	// whose effect is applied and not marked, and applies it again.
	MarkerAfterEffect bool `json:"markerAfterEffect,omitempty"`
	// OffsetBeforeEffect commits the consumer's offset before applying the
	// effect: a crash in between loses the event.
	OffsetBeforeEffect bool `json:"offsetBeforeEffect,omitempty"`
	// LockReleaseWithoutToken releases the external lock with a plain DEL
	// instead of compare-and-delete: a holder whose lock expired deletes the
	// next holder's.
	LockReleaseWithoutToken bool `json:"lockReleaseWithoutToken,omitempty"`
	// LockGetThenSet takes the external lock with a GET, then a SET if the
	// key was free, instead of one SET NX: two servers that try at once
	// both find it free, both set it, and both go on as its holder.
	LockGetThenSet bool `json:"lockGetThenSet,omitempty"`
	// ShipReadThenWrite marks an order shipped by reading its status and
	// then writing 'shipped' unconditionally: two concurrent calls both see
	// 'paid' and both report "shipped".
	ShipReadThenWrite bool `json:"shipReadThenWrite,omitempty"`
}

// Or returns f with every flaw of g switched on too.
func (f Flaws) Or(g Flaws) Flaws {
	return Flaws{
		SMSInTransaction:        f.SMSInTransaction || g.SMSInTransaction,
		SMSAfterCommit:          f.SMSAfterCommit || g.SMSAfterCommit,
		SMSBeforeChecks:         f.SMSBeforeChecks || g.SMSBeforeChecks,
		SMSPerOwnedAccount:      f.SMSPerOwnedAccount || g.SMSPerOwnedAccount,
		PublishInTransaction:    f.PublishInTransaction || g.PublishInTransaction,
		PublishAfterCommit:      f.PublishAfterCommit || g.PublishAfterCommit,
		NoEventForOwnAccounts:   f.NoEventForOwnAccounts || g.NoEventForOwnAccounts,
		NoProviderKey:           f.NoProviderKey || g.NoProviderKey,
		NoSkipLocked:            f.NoSkipLocked || g.NoSkipLocked,
		NoLeaseCheck:            f.NoLeaseCheck || g.NoLeaseCheck,
		NoClaimToken:            f.NoClaimToken || g.NoClaimToken,
		GiveUpOnSameError:       f.GiveUpOnSameError || g.GiveUpOnSameError,
		NoDedup:                 f.NoDedup || g.NoDedup,
		MarkerAfterEffect:       f.MarkerAfterEffect || g.MarkerAfterEffect,
		OffsetBeforeEffect:      f.OffsetBeforeEffect || g.OffsetBeforeEffect,
		LockReleaseWithoutToken: f.LockReleaseWithoutToken || g.LockReleaseWithoutToken,
		LockGetThenSet:          f.LockGetThenSet || g.LockGetThenSet,
		ShipReadThenWrite:       f.ShipReadThenWrite || g.ShipReadThenWrite,
	}
}
