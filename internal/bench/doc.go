// Package bench holds the experiments of `softnet bench`: each measures one
// mechanism of the datapath (per-worker caches, bulk allocation, deferred
// remote free, the flush of a remote-free list, batching, zero-copy
// receive) side by side with what Go programs use today, in the same run on
// the same machine. cmd/softnet prints them; the package's Go benchmarks
// run the very same variant bodies under `go test -bench`.
package bench
