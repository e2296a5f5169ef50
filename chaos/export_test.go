package chaos

// Ddmin is ddmin, for the tests.
var Ddmin = ddmin
