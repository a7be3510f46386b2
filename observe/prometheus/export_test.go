package promlimit

// Exported to the tests.
var (
	NearLimit = nearLimit
	StripeOf  = stripeOf
)

// Stripes is the number of stripes of a counter.
const Stripes = stripes
