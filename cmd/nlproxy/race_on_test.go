//go:build race

package main

// raceEnabled: the test binary was built with -race, so a binary the tests
// build with -race too reuses the compiled packages and only links.
const raceEnabled = true
