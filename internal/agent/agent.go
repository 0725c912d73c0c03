package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"softnet.dev/internal/agentstatus"
	"softnet.dev/internal/control"
	"softnet.dev/internal/statefile"
)

// DefaultStatus is where the agent of a node's switch keeps its status,
// the node's pod CIDRs among it, for softnet-cni and softnet ctl.
const DefaultStatus = agentstatus.DefaultPath

// Config is what an agent needs.
type Config struct {
	Node   string               // this node's Node name
	Client kubernetes.Interface // the cluster's API
	Switch *control.Client      // the node's switch
	// Port is the routed vxlan port the agent makes and owns on the
	// switch; VNI, DstPort (0: the IANA port, 4789) and NetNS (the
	// underlay's namespace; empty: the switch's) are its options.
	Port    string
	VNI     uint32
	DstPort uint16
	NetNS   string
	// VTEP is the underlay address to send from; invalid: the node's
	// first InternalIP (status.addresses), followed when it changes.
	VTEP netip.Addr
	// Status is the status file (DefaultStatus); the agent holds its
	// lock, so that one agent runs per file.
	Status string
	// Resync is how often the agent checks the switch against the
	// cluster without a change to prompt it (a switch restarted without
	// its state); default 30 s.
	Resync  time.Duration
	Log     *slog.Logger
	Metrics *Metrics // nil: none
}

// Status is the status file's contents, and what softnet ctl agent
// status shows.
type Status = agentstatus.Status

// Agent is a running agent.
type Agent struct {
	cfg  Config
	file *statefile.File
	kick chan struct{}

	saveMu sync.Mutex // one Save at a time
	mu     sync.Mutex
	status Status
	// pending is when the first Node event not yet applied arrived.
	pending time.Time
}

// New checks cfg and takes the status file's lock.
func New(cfg Config) (*Agent, error) {
	if cfg.Node == "" {
		return nil, errors.New("agent: no node name: give --node or NODE_NAME")
	}
	if cfg.Port == "" || cfg.Client == nil || cfg.Switch == nil || cfg.Log == nil {
		return nil, errors.New("agent: Port, Client, Switch and Log are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Status == "" {
		cfg.Status = DefaultStatus
	}
	f, err := statefile.Open(cfg.Status)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{cfg: cfg, file: f, kick: make(chan struct{}, 1)}
	a.status = Status{Node: cfg.Node, Port: cfg.Port, PodCIDRs: []string{}}
	if old, err := agentstatus.Read(cfg.Status); err == nil && old.Node == cfg.Node {
		// The pod CIDRs stay known to softnet-cni across a restart of
		// the agent while the API server is away.
		a.status.PodCIDRs = old.PodCIDRs
	}
	return a, nil
}

// MAC returns the VTEP MAC of the node named node: locally
// administered, from a hash of the name, so that it stays the same
// across restarts of the agent and the switch.
func MAC(node string) [6]byte {
	h := sha256.Sum256([]byte("softnet.dev/vtep-mac\x00" + node))
	m := [6]byte(h[:6])
	m[0] = m[0]&0xfe | 0x02
	return m
}

// Run watches Nodes and keeps the switch in step until ctx ends. The
// switch keeps forwarding on what it was last given whatever happens
// here: Run retries what fails (the API server away: client-go lists
// and watches again with backoff; the switch away: the next attempt,
// at most Resync later).
func (a *Agent) Run(ctx context.Context) error {
	defer a.file.Close()
	factory := informers.NewSharedInformerFactoryWithOptions(a.cfg.Client, 0)
	inf := factory.Core().V1().Nodes()
	informer := inf.Informer()
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		a.apiReachable(false, err)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.changed() },
		UpdateFunc: func(old, cur any) { a.updated(old, cur) },
		DeleteFunc: func(any) { a.changed() },
	}); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	a.cfg.Log.Info("agent started", "node", a.cfg.Node, "port", a.cfg.Port, "status", a.cfg.Status)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	a.apiReachable(true, nil)
	go a.probe(ctx)
	lister := inf.Lister()
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		case <-timer.C:
		}
		// Events come in bursts (a list, a rollout): take them in one
		// sync.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
		select {
		case <-a.kick:
		default:
		}
		nodes, err := lister.List(labels.Everything())
		if err == nil {
			err = a.sync(ctx, nodes)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, 200*time.Millisecond), a.cfg.Resync)
			a.cfg.Log.Warn("agent: sync failed; the switch forwards on what it has, and the agent tries again", "err", err, "retry_in", backoff)
		} else {
			backoff = 0
		}
		timer.Reset(cmp.Or(backoff, a.cfg.Resync))
	}
}

// probeEvery is how often the agent asks the API server whether it is
// ready: a watch cut by a server that went away is retried by
// client-go without a word to the agent, which would go on saying the
// API is reachable.
const probeEvery = 5 * time.Second

// probe asks the API server's /readyz (which fails while etcd is away
// too) every probeEvery until ctx ends, and records the answer.
func (a *Agent) probe(ctx context.Context) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, probeEvery)
		_, err := a.cfg.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			err = fmt.Errorf("readyz: %w", err)
		}
		a.apiReachable(err == nil, err)
	}
}

// changed notes a Node event and wakes the sync.
func (a *Agent) changed() {
	a.mu.Lock()
	if a.pending.IsZero() {
		a.pending = time.Now()
	}
	a.mu.Unlock()
	a.apiReachable(true, nil)
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// updated is changed for an update that changes what the agent reads:
// kubelet's status updates every few seconds do not.
func (a *Agent) updated(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion && !relevant(o, n) {
		return
	}
	a.changed()
}

// relevant says whether a Node's update changes a peer or this node.
func relevant(o, n *corev1.Node) bool {
	return o.Annotations[AnnotationVTEP] != n.Annotations[AnnotationVTEP] ||
		o.Annotations[AnnotationVTEPMAC] != n.Annotations[AnnotationVTEPMAC] ||
		o.Spec.PodCIDR != n.Spec.PodCIDR || !slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) ||
		!slices.Equal(o.Status.Addresses, n.Status.Addresses)
}

// apiReachable records whether the last list or watch succeeded.
func (a *Agent) apiReachable(ok bool, err error) {
	a.mu.Lock()
	was := a.status.APIReachable
	a.status.APIReachable = ok
	a.mu.Unlock()
	if ok && was {
		return
	}
	if a.cfg.Metrics != nil {
		a.cfg.Metrics.apiUp(ok)
	}
	if !ok {
		if a.cfg.Metrics != nil {
			a.cfg.Metrics.errors.WithLabelValues("kubernetes").Inc()
		}
		if was {
			a.cfg.Log.Warn("agent: the Kubernetes API is unreachable; the switch forwards on what it has", "err", err)
		}
	} else if !was {
		a.cfg.Log.Info("agent: the Kubernetes API is reachable")
	}
	if was != ok {
		a.save()
	}
}

// sync makes the switch and this node's annotations what nodes say.
func (a *Agent) sync(ctx context.Context, nodes []*corev1.Node) (err error) {
	start := time.Now()
	a.mu.Lock()
	pending := a.pending
	a.pending = time.Time{}
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		if err != nil {
			a.status.Error = err.Error()
			if a.pending.IsZero() {
				a.pending = pending // still not applied
			}
		} else {
			a.status.Error, a.status.Synced = "", time.Now()
		}
		a.mu.Unlock()
		if m := a.cfg.Metrics; m != nil {
			m.synced(start, pending, err)
		}
		a.save()
	}()
	i := slices.IndexFunc(nodes, func(n *corev1.Node) bool { return n.Name == a.cfg.Node })
	if i < 0 {
		return fmt.Errorf("node %s: no such Node", a.cfg.Node)
	}
	node := nodes[i]
	self := Peer{Node: node.Name, MAC: MAC(node.Name)}
	if self.VTEP = a.cfg.VTEP; !self.VTEP.IsValid() {
		if self.VTEP, err = internalIP(node); err != nil {
			return err
		}
	}
	if self.PodCIDRs, err = PodCIDRs(node); err != nil {
		return err
	}
	cidrs := make([]string, len(self.PodCIDRs))
	for i, p := range self.PodCIDRs {
		cidrs[i] = p.String()
	}
	a.mu.Lock()
	a.status.PodCIDRs, a.status.VTEP, a.status.VTEPMAC = cidrs, self.VTEP.String(), net.HardwareAddr(self.MAC[:]).String()
	a.mu.Unlock()
	a.save() // softnet-cni's ranges, before anything else can fail
	peers, skipped := Peers(self, nodes)
	if err := a.program(ctx, self, peers); err != nil {
		return err
	}
	if err := a.annotate(ctx, node, self); err != nil {
		return err
	}
	var why []string
	for _, e := range skipped {
		why = append(why, e.Error())
	}
	a.mu.Lock()
	a.status.Peers, a.status.Skipped = len(peers), why
	a.status.Routes = 0
	for _, p := range peers {
		a.status.Routes += len(p.PodCIDRs)
	}
	a.mu.Unlock()
	if m := a.cfg.Metrics; m != nil {
		m.peers.Set(float64(len(peers)))
		m.skipped.Set(float64(len(skipped)))
	}
	return nil
}

// internalIP is the node's first InternalIP, as kubelet reports it.
func internalIP(n *corev1.Node) (netip.Addr, error) {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil {
				return ip, fmt.Errorf("node %s: InternalIP %q: %w", n.Name, a.Address, err)
			}
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s: no InternalIP in its status, and no --vtep-address", n.Name)
}

// portSpec is the spec of the agent's port for self, without its
// remotes and fdb entries. allow=any: the other nodes' pods send from
// their pod CIDRs, which the routes to the port would each allow by
// default, and port security holds at most 1,024 prefixes a port (a
// dual-stack cluster of 513 nodes has more); what arrives comes only
// from the nodes' VTEPs (IP_RPFILTER drops the rest), as in Flannel's
// overlay.
func (a *Agent) portSpec(self Peer) string {
	s := fmt.Sprintf("vxlan:%s,vni=%d,local=%s,mode=l3,vtep-mac=%s,allow=any", a.cfg.Port, a.cfg.VNI, self.VTEP, net.HardwareAddr(self.MAC[:]))
	if a.cfg.DstPort != 0 {
		s += ",port=" + strconv.Itoa(int(a.cfg.DstPort))
	}
	if a.cfg.NetNS != "" {
		s += ",netns=" + a.cfg.NetNS
	}
	return s
}

// program makes the switch's port and its routes what self and peers
// say, in at most one change of the port (and one more to add it, or
// to add it again when this node's VTEP moved).
func (a *Agent) program(ctx context.Context, self Peer, peers []Peer) error {
	spec := a.portSpec(self)
	var cur control.Port
	err := a.cfg.Switch.Get(ctx, "/v1/ports/"+a.cfg.Port, &cur)
	var refused *control.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == 404:
		if err := a.addPort(ctx, spec); err != nil {
			return err
		}
		cur = control.Port{Name: a.cfg.Port}
	case err != nil:
		return fmt.Errorf("switch: %w", err)
	case cur.Origin != "agent":
		return fmt.Errorf("switch: port %s is the %s's (%s), not the agent's: give the agent another --port, or remove it", a.cfg.Port, cur.Origin, cur.Spec)
	default:
		if moved := a.moved(cur, self); moved != "" {
			a.cfg.Log.Info("agent: the port's "+moved+" changed; adding it again", "port", a.cfg.Port, "was", cur.Spec, "spec", spec)
			if err := a.cfg.Switch.Delete(ctx, "/v1/ports/"+a.cfg.Port); err != nil && !isStatus(err, 404) {
				return fmt.Errorf("switch: remove port %s: %w", a.cfg.Port, err)
			}
			if err := a.addPort(ctx, spec); err != nil {
				return err
			}
			cur = control.Port{Name: a.cfg.Port}
		}
	}
	var remotes, fdb []string
	var routes []control.Route
	for _, p := range peers {
		remotes = append(remotes, p.VTEP.String())
		fdb = append(fdb, net.HardwareAddr(p.MAC[:]).String()+"@"+p.VTEP.String())
		for _, c := range p.PodCIDRs {
			routes = append(routes, control.Route{Prefix: c.String(), Port: a.cfg.Port, Via: p.VTEP.String()})
		}
	}
	var all []control.Route
	if err := a.cfg.Switch.Get(ctx, "/v1/routes", &all); err != nil {
		return fmt.Errorf("switch: %w", err)
	}
	var have []control.Route
	for _, r := range all {
		if r.Port == a.cfg.Port {
			have = append(have, control.Route{Prefix: r.Prefix, Port: r.Port, Via: r.Via})
		}
	}
	byPrefix := func(x, y control.Route) int { return strings.Compare(x.Prefix, y.Prefix) }
	slices.SortFunc(have, byPrefix)
	slices.SortFunc(routes, byPrefix)
	if strings.Join(remotes, ",") == cur.Options.Get("remote") && strings.Join(fdb, ",") == cur.Options.Get("fdb") && slices.Equal(have, routes) {
		return nil
	}
	if routes == nil {
		routes = []control.Route{}
	}
	body := control.PortChange{Options: map[string]string{"remote": strings.Join(remotes, ","), "fdb": strings.Join(fdb, ",")}, Routes: &routes, Origin: "agent"}
	if err := a.cfg.Switch.Patch(ctx, "/v1/ports/"+a.cfg.Port, body, nil); err != nil {
		return fmt.Errorf("switch: port %s: %d peers, %d routes: %w", a.cfg.Port, len(peers), len(routes), err)
	}
	a.cfg.Log.Info("agent: switch programmed", "port", a.cfg.Port, "peers", len(peers), "routes", len(routes), "was", len(have))
	return nil
}

// moved names the option of the port cur that does not change in place
// and that self makes another, "" if none: another value makes the
// agent add the port again.
func (a *Agent) moved(cur control.Port, self Peer) string {
	port := ""
	if a.cfg.DstPort != 0 {
		port = strconv.Itoa(int(a.cfg.DstPort))
	}
	for _, o := range []struct{ key, want string }{
		{"vni", strconv.FormatUint(uint64(a.cfg.VNI), 10)},
		{"local", self.VTEP.String()},
		{"port", port},
		{"mode", "l3"},
		{"vtep-mac", net.HardwareAddr(self.MAC[:]).String()},
	} {
		if cur.Options.Get(o.key) != o.want {
			return o.key
		}
	}
	if cur.Allow != "any" {
		return "allow"
	}
	if cur.Netns != a.cfg.NetNS {
		return "netns"
	}
	return ""
}

func (a *Agent) addPort(ctx context.Context, spec string) error {
	if err := a.cfg.Switch.Post(ctx, "/v1/ports", control.PortRequest{Spec: spec, Origin: "agent"}, nil); err != nil {
		return fmt.Errorf("switch: add port %s: %w", spec, err)
	}
	a.cfg.Log.Info("agent: port added", "spec", spec)
	return nil
}

func isStatus(err error, status int) bool {
	var refused *control.RefusedError
	return errors.As(err, &refused) && refused.Status == status
}

// annotate publishes self's VTEP and MAC on its Node, if they differ:
// a merge patch of the two annotations alone, which the ClusterRole's
// patch on nodes allows and which touches nothing else of the Node.
func (a *Agent) annotate(ctx context.Context, node *corev1.Node, self Peer) error {
	vtep, mac := self.VTEP.String(), net.HardwareAddr(self.MAC[:]).String()
	if node.Annotations[AnnotationVTEP] == vtep && node.Annotations[AnnotationVTEPMAC] == mac {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationVTEP: vtep, AnnotationVTEPMAC: mac}}})
	_, err := a.cfg.Client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "softnet-agent"})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("node %s: deleted", node.Name)
		}
		return fmt.Errorf("node %s: annotate: %w", node.Name, err)
	}
	a.cfg.Log.Info("agent: node annotated", "node", node.Name, "vtep", vtep, "vtep_mac", mac)
	return nil
}

// save writes the status file; a failure is logged (softnet-cni reads
// the last one written).
func (a *Agent) save() {
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.mu.Lock()
	a.status.Updated = time.Now()
	a.status.PID = os.Getpid()
	b, _ := json.MarshalIndent(a.status, "", "  ") // strings, numbers and times
	a.mu.Unlock()
	if err := a.file.Save(append(b, '\n')); err != nil {
		a.cfg.Log.Error("agent: status file not saved", "err", err)
	}
}
