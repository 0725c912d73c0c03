// Package endpoint gives applications in the switch's process zero-copy
// access to the packets addressed to them, after io_uring's zero-copy
// receive (zcrx): received buffers are lent as read-only views and come
// back through a refill ring that the worker drains.
//
// A Table is a program, a consumer, a poller and a receive-only port of
// the engine at once; an application binds a flow on it:
//
//	table, _ := endpoint.NewTable(endpoint.Config{Pool: pool})
//	eng, _ := engine.New(engine.Config{Pool: pool, Programs: []program.Program{table},
//		Consumers: []engine.Consumer{table}, Pollers: []engine.Poller{table}}, tap, table)
//	ep, _ := table.Bind(endpoint.UDP(netip.MustParseAddrPort("198.18.0.1:7")), endpoint.Options{})
//	ep.Wait(ctx)
//	n, _ := ep.Receive(views) // views[i].Payload points into softnet's buffer
//	ep.Release(views[:n]...)
//
// Send and Buffers send without a copy; ReadFrom and WriteTo copy, like a
// socket. A view released twice, or not lent, is refused with ErrNotLent
// and frees nothing; an application that never releases holds at most
// its quota, past which its flow drops as drop.SocketRcvBuff.
// Config.Debug records release sites and poisons released payloads.
//
// Design: docs/design.md, "Zero-copy receive for applications (zcrx)".
package endpoint
