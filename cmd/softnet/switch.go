package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"softnet.dev/internal/vswitch"
)

func newSwitchCmd() *cobra.Command {
	var (
		ports, routes []string
		services      []string
		workers       int
		configFile    string
		statsJSON     string
	)
	cmd := &cobra.Command{
		Use:   "switch --port SPEC --port SPEC [--route PREFIX=PORT]... [--workers N]",
		Short: "Run a userspace virtual switch between TUN or TAP ports",
		Long: `switch connects network namespaces, containers and VMs through TUN (L3) or
TAP (L2) devices. TUN ports are routed by the L3 forwarder (static routes
plus source addresses learned per port; TTL is decremented); TAP ports are
bridged by MAC address. Addresses inside the guests are the operator's
business: configure them with ip(8) once the switch has created the devices.

A port is kind:NAME[,netns=NS][,queues=N][,offload=on|off][,gro=on|off]:
  kind      tun or tap
  NAME      the device: created if missing (and removed at exit), else
            attached to and left as found
  netns     a named network namespace (ip netns add NS) to put it in
  queues    queues (default: one per worker)
  offload   virtio-net header with checksum and segmentation offloads (on)
  gro       coalesce each burst's segments of a TCP or UDP flow into one
            GSO packet for this port: one write instead of many (on with
            offload; needs it)

A service is a built-in application the switch runs on a zero-copy
endpoint (package endpoint), answering guests at ADDR:PORT, which is
routed to it: udp-echo:ADDR:PORT sends every datagram back to its source
(payloads up to 2020 bytes), udp-sink:ADDR:PORT counts them.

The configuration file has one directive per line: "port SPEC",
"route PREFIX=PORT", "service KIND:ADDR:PORT", "workers N"; '#' starts a
comment.

On SIGINT or SIGTERM the switch stops within 2 s, closes every port,
prints per-port statistics, drops by reason and the buffer leak check, and
exits non-zero if buffers leaked. Needs root (CAP_NET_ADMIN).`,
		Example: `  ip netns add guest1; ip netns add guest2
  softnet switch --port tun:sn0,netns=guest1 --port tun:sn1,netns=guest2 \
      --route 198.18.1.0/24=sn0 --route 198.18.2.0/24=sn1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var cfg vswitch.Config
			if configFile != "" {
				f, err := os.Open(configFile)
				if err != nil {
					return usageError{err}
				}
				cfg, err = vswitch.ParseConfig(configFile, f)
				f.Close()
				if err != nil {
					return usageError{err}
				}
			}
			for _, s := range ports {
				p, err := vswitch.ParsePort(s)
				if err != nil {
					return usageError{err}
				}
				cfg.Ports = append(cfg.Ports, p)
			}
			for _, s := range routes {
				r, err := vswitch.ParseRoute(s)
				if err != nil {
					return usageError{err}
				}
				cfg.Routes = append(cfg.Routes, r)
			}
			for _, s := range services {
				sv, err := vswitch.ParseService(s)
				if err != nil {
					return usageError{err}
				}
				cfg.Services = append(cfg.Services, sv)
			}
			if cmd.Flags().Changed("workers") || cfg.Workers == 0 {
				cfg.Workers = workers
			}
			if err := cfg.Validate(); err != nil {
				return usageError{err}
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			sw, err := vswitch.Open(cfg, log)
			if err != nil {
				return err
			}
			rep, err := sw.Run(cmd.Context())
			if rep != nil {
				if werr := rep.WriteText(cmd.OutOrStdout()); werr != nil {
					err = werr
				}
				if statsJSON != "" {
					if jerr := writeJSONFile(statsJSON, rep); jerr != nil {
						err = jerr
					}
				}
				if rep.Leaked > 0 {
					return &exitError{code: exitFailure, err: fmt.Errorf("%d buffers leaked", rep.Leaked)}
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&ports, "port", nil, "a port: tun:NAME or tap:NAME with ,netns=NS ,queues=N ,offload=on|off ,gro=on|off")
	f.StringArrayVar(&routes, "route", nil, "a static route PREFIX=PORT (tun ports)")
	f.StringArrayVar(&services, "service", nil, "a built-in service: udp-echo:ADDR:PORT or udp-sink:ADDR:PORT (tun ports)")
	f.IntVar(&workers, "workers", 1, "worker goroutines (each polls one queue of every port)")
	f.StringVar(&configFile, "config", "", "read ports, routes and workers from FILE")
	f.StringVar(&statsJSON, "stats-json", "", "also write the final statistics as JSON to FILE")
	return cmd
}

func writeJSONFile(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}
