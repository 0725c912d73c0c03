package memport

// maxQueues bounds the queue count of every port here; real devices have
// at most a few hundred.
const maxQueues = 1024
