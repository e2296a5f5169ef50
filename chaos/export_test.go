package chaos

// Ddmin is ddmin, for the tests.
var Ddmin = ddmin

// ChaosCell is chaosCell, for the tests.
var ChaosCell = chaosCell
