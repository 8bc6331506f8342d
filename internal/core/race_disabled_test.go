//go:build !race

package core

// raceEnabled reports whether the race detector is on: heavy tests and
// benchmarks skip themselves under it.
const raceEnabled = false
