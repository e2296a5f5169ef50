package zoo

// TwoStepTransfer debits and credits in two steps, the bank unlocked in
// between: the money is missing while in flight (total-not-conserved alone,
// seen by the audits while transfers run; the final balances add up).
var TwoStepTransfer = Member{
	Name:   "two-step-transfer",
	Class:  "the debit and the credit are two steps, unlocked in between: the money is missing while in flight",
	Defect: Defect{TwoStep: true},
}
