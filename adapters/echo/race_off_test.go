//go:build !race

package echolimit

// raceEnabled is whether the race detector is on: its sync.Pool drops
// items at random, so that allocation counts do not hold.
const raceEnabled = false
