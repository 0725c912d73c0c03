package memport

// pad keeps the state one goroutine writes (a queue's counters, its ring
// position) off the cache lines of state that others write. 128 bytes,
// because x86 adjacent-line prefetch moves lines in pairs.
type pad [128]byte

// maxQueues bounds the queue count of every port here; real devices have
// at most a few hundred.
const maxQueues = 1024
