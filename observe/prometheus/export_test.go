package promlimit

// Exported to the tests.
var (
	StripeOf = stripeOf
)

// Stripes is the number of stripes of a counter.
const Stripes = stripes
