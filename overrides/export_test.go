package overrides

import "github.com/apigate/ratelimit/core"

// MaxScale is the largest Override.Scale, for tests.
const MaxScale = maxScale

// Apply is o.applyTo(p), for tests.
func Apply(o Override, p core.Policy) core.Policy { return o.applyTo(p) }
