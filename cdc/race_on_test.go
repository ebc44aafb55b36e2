//go:build race

package cdc

// raceEnabled: the race detector slows CDC about tenfold; big tests shrink.
const raceEnabled = true
