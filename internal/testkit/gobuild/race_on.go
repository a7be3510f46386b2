//go:build race

package gobuild

// raceEnabled reports a build with the race detector.
const raceEnabled = true
