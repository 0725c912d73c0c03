// Package drop names the reasons a packet buffer is freed without reaching
// its destination, after the Linux kernel's enum skb_drop_reason: every
// path that loses a packet frees its buffer with exactly one Reason
// (buffer.Cache.Drop), while a delivered packet is consumed
// (buffer.Cache.Consume). Reasons are small integers, so that per-worker
// counters are plain arrays (Counts) that cost one increment and are
// summed when read.
//
// Design: docs/design.md, "Drop reasons".
package drop
