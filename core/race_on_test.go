//go:build race

package core_test

// raceEnabled reports a build with the race detector, whose sync.Pool
// drops a share of what it is given (so pooled arrays are allocated again).
const raceEnabled = true
