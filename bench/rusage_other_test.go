//go:build !unix

package bench

import "time"

// processCPU cannot tell on this platform.
func processCPU() (time.Duration, bool) { return 0, false }
