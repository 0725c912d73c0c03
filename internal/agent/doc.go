// Package agent is softnet's node agent for Kubernetes: it watches the
// cluster's Nodes and programs the node's switch, through its control
// API, with a route to every other node's pod CIDRs via that node's
// VTEP on a routed vxlan port, the port's remotes and static fdb
// entries; it publishes its own node's VTEP as annotations and gives
// the node's pod CIDRs to softnet-cni's IPAM.
//
// The switch forwards on what it was last given: the agent is not in
// the datapath, and neither the API server nor the agent being away
// stops a packet.
package agent
