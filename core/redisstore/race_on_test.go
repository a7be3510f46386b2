//go:build race

package redisstore

// raceSlowdown divides the load of the tests that pace one (the race
// detector makes each decision several times slower).
const raceSlowdown = 4
