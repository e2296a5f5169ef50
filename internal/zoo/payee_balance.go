package zoo

// PayeeBalance checks the payee's balance, not the payer's: a poor payer
// goes below zero (negative-balance alone).
var PayeeBalance = Member{
	Name:   "payee-balance",
	Class:  "the balance checked is the payee's, not the payer's: a poor payer goes below zero",
	Defect: Defect{CheckPayee: true},
}
