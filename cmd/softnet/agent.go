package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"softnet.dev/internal/agent"
	"softnet.dev/internal/agentstatus"
	"softnet.dev/internal/control"
	"softnet.dev/internal/netns"
	"softnet.dev/vxlan"
)

func newAgentCmd() *cobra.Command {
	var (
		kubeconfig, node, socket, portName, underlayNS, vtep, status, metricsAddr string
		logFormat, logLevel                                                       string
		vni, dstPort                                                              uint
		resync                                                                    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Program the node's switch with routes to every other node's pods, from the Kubernetes API",
		Long: `agent is the node agent of a Kubernetes cluster network on softnet. It
watches the cluster's Nodes and keeps the node's switch, through its control
socket, in step: a routed vxlan port of its own (--port, made with origin
agent: a reload of the switch's configuration never touches it), and for
every other node that published its VTEP a remote, a static fdb entry of its
VTEP MAC and a route to each of its pod CIDRs via its VTEP. It publishes
this node's VTEP (its InternalIP, or --vtep-address) and VTEP MAC as the
annotations softnet.dev/vtep and softnet.dev/vtep-mac, and writes the node's
pod CIDRs (spec.podCIDRs) to its status file, where softnet-cni reads them
for host-local's ranges.

The switch forwards on what it was given: while the API server or etcd is
away, or the agent is stopped or restarting, pods keep their traffic; the
agent lists Nodes again when it can and makes the switch what they say.`,
		Example: `  softnet agent --node "$NODE_NAME"                  # in a pod of the DaemonSet
  softnet agent --kubeconfig /etc/kubernetes/kubelet.conf --node node1 --metrics 127.0.0.1:9478`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node = cmp.Or(node, os.Getenv("NODE_NAME"))
			if node == "" {
				return usageError{errors.New("--node: no node name (nor NODE_NAME in the environment)")}
			}
			if vni > vxlan.MaxVNI {
				return usageError{fmt.Errorf("--vni %d: want 0 to %d", vni, vxlan.MaxVNI)}
			}
			if dstPort > 65535 {
				return usageError{fmt.Errorf("--vxlan-port %d: want 1 to 65535", dstPort)}
			}
			if !netns.Valid(underlayNS) {
				return usageError{fmt.Errorf("--underlay-netns %q: want a name or an absolute path", underlayNS)}
			}
			var vtepAddr netip.Addr
			if vtep != "" {
				var err error
				if vtepAddr, err = netip.ParseAddr(vtep); err != nil {
					return usageError{fmt.Errorf("--vtep-address %q: want an IP address", vtep)}
				}
			}
			var metricsLn net.Listener
			if metricsAddr != "" {
				addr, err := metricsListenAddr(metricsAddr)
				if err != nil {
					return usageError{err}
				}
				if metricsLn, err = net.Listen("tcp", addr); err != nil {
					return fmt.Errorf("--metrics: %w", err)
				}
				defer metricsLn.Close()
			}
			log, err := newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return usageError{err}
			}
			cs, err := agent.NewClientset(kubeconfig, "softnet-agent/"+node)
			if err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			a, err := agent.New(agent.Config{Node: node, Client: cs, Switch: control.NewClient(socket), Port: portName,
				VNI: uint32(vni), DstPort: uint16(dstPort), NetNS: underlayNS, VTEP: vtepAddr, Status: status,
				Resync: resync, Log: log, Metrics: agent.NewMetrics(reg)})
			if err != nil {
				return err
			}
			if metricsLn != nil {
				mux := http.NewServeMux()
				mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
				go func() {
					if err := srv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
						log.Error("metrics", "err", err)
					}
				}()
				defer srv.Close()
				log.Info("metrics", "url", "http://"+metricsLn.Addr().String()+"/metrics")
			}
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "the cluster's kubeconfig (default: the pod's service account, in a cluster)")
	f.StringVar(&node, "node", "", "this node's Node name (default: $NODE_NAME)")
	f.StringVar(&socket, "socket", control.DefaultSocket, "the switch's control socket")
	f.StringVar(&portName, "port", "cluster0", "the name of the agent's routed vxlan port on the switch")
	f.UintVar(&vni, "vni", 1, "the cluster network's VXLAN network identifier, the same on every node")
	f.UintVar(&dstPort, "vxlan-port", 0, "the UDP port of the nodes' VTEPs (default 4789), the same on every node")
	f.StringVar(&underlayNS, "underlay-netns", "", "the network namespace of the underlay (the node's network; default: the switch's)")
	f.StringVar(&vtep, "vtep-address", "", "the underlay address to send from (default: the node's InternalIP, followed when it changes)")
	f.StringVar(&status, "status", agent.DefaultStatus, "the status file: the node's pod CIDRs for softnet-cni, the agent's state for softnet ctl agent")
	f.StringVar(&metricsAddr, "metrics", "", "serve Prometheus metrics (softnet_agent_*) at http://ADDR/metrics: HOST:PORT, or PORT alone")
	f.DurationVar(&resync, "resync", 30*time.Second, "how often to check the switch without a change of the Nodes (a switch restarted without its state)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// newCtlAgentCmd is softnet ctl agent: the node agent's status, from
// the status file it keeps (the agent is a process of its own; the
// switch knows only the port and routes it made, which port show and
// route list show with origin agent).
func newCtlAgentCmd() *cobra.Command {
	var status string
	var asJSON bool
	show := &cobra.Command{
		Use:   "status [--status FILE] [--json]",
		Short: "Show the node agent's status: its node, pod CIDRs, VTEP, peers, last sync and error",
		Long: `status reads the status file softnet agent keeps (--status, default
` + agent.DefaultStatus + `) and says whether the agent runs, when it last found
or made the switch as the cluster says, its error since, and whether it
reaches the Kubernetes API. The routes it made are in route list, with origin
agent.`,
		Example: `  softnet ctl agent status
  softnet ctl agent status --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := agentstatus.Read(status)
			if err != nil {
				return &exitError{exitFailure, err}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
			}
			w := cmd.OutOrStdout()
			running := "no (no process " + strconv.Itoa(st.PID) + ")"
			if st.PID > 0 && syscall.Kill(st.PID, 0) == nil {
				running = "yes (pid " + strconv.Itoa(st.PID) + ")"
			}
			fmt.Fprintf(w, "node:       %s\nrunning:    %s\npod CIDRs:  %s\nVTEP:       %s %s on port %s\npeers:      %d (%d routes)\n",
				st.Node, running, orNone(strings.Join(st.PodCIDRs, " ")), orNone(st.VTEP), st.VTEPMAC, st.Port, st.Peers, st.Routes)
			synced := "never"
			if !st.Synced.IsZero() {
				synced = st.Synced.Format(time.RFC3339) + " (" + time.Since(st.Synced).Round(time.Second).String() + " ago)"
			}
			fmt.Fprintf(w, "synced:     %s\nAPI:        %s\nerror:      %s\n", synced, map[bool]string{true: "reachable", false: "unreachable"}[st.APIReachable], orNone(st.Error))
			for _, s := range st.Skipped {
				fmt.Fprintf(w, "skipped:    %s\n", s)
			}
			return nil
		},
	}
	show.Flags().StringVar(&status, "status", agent.DefaultStatus, "the agent's status file")
	show.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd := &cobra.Command{Use: "agent", Short: "Show the node agent's status", Args: cobra.NoArgs,
		Example: "  softnet ctl agent status",
		RunE: func(*cobra.Command, []string) error {
			return usageError{errors.New("agent needs a command: status")}
		}}
	cmd.AddCommand(show)
	return cmd
}
