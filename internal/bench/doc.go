// Package bench holds softnet's experiments: each reproduces one mechanism
// of the seeds side by side with what Go programs use today, measured in
// the same run on the same machine. cmd/softnet prints them; the package's
// Go benchmarks run the very same variant bodies under `go test -bench`.
package bench
