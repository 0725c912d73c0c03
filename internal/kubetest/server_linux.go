package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"softnet.dev/internal/netnstest"
)

// User is an identity in the API server's static token file.
type User struct {
	Name   string
	Groups []string
}

// Admin may do anything: it is in system:masters.
var Admin = User{Name: "softnet-test-admin", Groups: []string{"system:masters"}}

// ServiceAccount returns the identity that the API server gives a token
// of the service account namespace/name (what a pod running as it has).
func ServiceAccount(namespace, name string) User {
	return User{
		Name:   "system:serviceaccount:" + namespace + ":" + name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
	}
}

// Agent is the identity of the cluster agent: the ServiceAccount of
// docs/kubernetes.md's manifests. Every Server has a token for it.
var Agent = ServiceAccount("kube-system", "softnet")

// readyTimeout bounds the wait for a server to answer after a start. It
// is a bound, not a goal: on a loaded 2-core machine kube-apiserver's
// first start (which writes its bootstrap objects into an empty etcd)
// takes seconds, and a restart less.
const readyTimeout = 3 * time.Minute

// Server is an etcd and a kube-apiserver run for one test.
type Server struct {
	// URL is the API server's address, https://127.0.0.1:PORT.
	URL string
	// Dir holds the data directory, certificates, token file,
	// kubeconfigs and both servers' logs.
	Dir string

	pki       *pki
	tokens    map[string]string // user name: token
	etcd      *process
	etcdURL   string
	apiserver *process
}

// Start starts etcd and kube-apiserver for the test, with tokens for
// Admin, Agent and the users given, and waits until the API server is
// ready. It skips the test when etcd or kube-apiserver is missing (fails
// under SOFTNET_REQUIRE_ROOT_TESTS=1). Both are stopped when the test
// ends.
func Start(t testing.TB, users ...User) *Server {
	t.Helper()
	netnstest.RequireTools(t, "etcd")
	apiserverBin, missing := findAPIServer()
	if missing != "" {
		netnstest.SkipOrFail(t, missing)
	}
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal(err)
	}

	s := &Server{Dir: t.TempDir(), tokens: map[string]string{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range []*process{s.apiserver, s.etcd} {
				if p != nil {
					t.Logf("kubetest: the end of %s's log (%s):\n%s", p.name, p.log, p.logTail(15))
				}
			}
		}
		s.stopAll(t)
	})
	if s.pki, err = newPKI(s.Dir); err != nil {
		t.Fatal(err)
	}
	tokenFile, err := s.writeTokens(append([]User{Admin, Agent}, users...))
	if err != nil {
		t.Fatal(err)
	}
	var ports [3]string
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			t.Fatal(err)
		}
	}
	clientPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	s.etcdURL = "http://127.0.0.1:" + clientPort
	peerURL := "http://127.0.0.1:" + peerPort
	s.URL = "https://127.0.0.1:" + apiPort

	s.etcd = &process{
		name: "etcd",
		bin:  etcdBin,
		log:  filepath.Join(s.Dir, "etcd.log"),
		args: []string{
			"--name=kubetest",
			"--data-dir=" + filepath.Join(s.Dir, "etcd"),
			"--listen-client-urls=" + s.etcdURL,
			"--advertise-client-urls=" + s.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=kubetest=" + peerURL,
			"--logger=zap",
			"--log-outputs=stderr",
		},
	}
	s.apiserver = &process{
		name: "kube-apiserver",
		bin:  apiserverBin,
		log:  filepath.Join(s.Dir, "kube-apiserver.log"),
		args: []string{
			"--etcd-servers=" + s.etcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + apiPort,
			"--tls-cert-file=" + s.pki.certFile,
			"--tls-private-key-file=" + s.pki.keyFile,
			"--cert-dir=" + filepath.Join(s.Dir, "certs"), // unused: never the default /var/run/kubernetes
			"--token-auth-file=" + tokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + s.pki.saPubFile,
			"--service-account-signing-key-file=" + s.pki.saKeyFile,
			// Services are only objects here; their range is one of
			// the test ranges all the same.
			"--service-cluster-ip-range=198.19.255.0/24",
			// The reconciler would publish 127.0.0.1 as the kubernetes
			// Service's endpoint, which validation refuses (loopback).
			"--endpoint-reconciler-type=none",
			// The cluster network's DaemonSet runs privileged.
			"--allow-privileged=true",
			"--profiling=false",
		},
	}
	s.StartEtcd(t)
	s.StartAPIServer(t)
	return s
}

// writeTokens writes the static token file, one random token per user,
// as token,user,uid,"group,...".
func (s *Server) writeTokens(users []User) (string, error) {
	path := filepath.Join(s.Dir, "tokens.csv")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("kubetest: token file: %w", err)
	}
	w := csv.NewWriter(f)
	for _, u := range users {
		if _, ok := s.tokens[u.Name]; ok {
			continue
		}
		b := make([]byte, 16)
		rand.Read(b)
		tok := hex.EncodeToString(b)
		s.tokens[u.Name] = tok
		if err := w.Write([]string{tok, u.Name, u.Name, strings.Join(u.Groups, ",")}); err != nil {
			f.Close()
			return "", fmt.Errorf("kubetest: token file: %w", err)
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return "", fmt.Errorf("kubetest: token file: %w", err)
	}
	return path, f.Close()
}

// Config returns a client configuration authenticating as u, one of the
// users Start was given (or Admin, Agent).
func (s *Server) Config(t testing.TB, u User) *rest.Config {
	t.Helper()
	tok, ok := s.tokens[u.Name]
	if !ok {
		t.Fatalf("kubetest: no token for %s: pass it to Start", u.Name)
	}
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.pki.caPEM},
	}
}

// Client returns a clientset authenticating as u.
func (s *Server) Client(t testing.TB, u User) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.Config(t, u))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Kubeconfig writes a kubeconfig file authenticating as u, for a program
// run as its own process (`softnet agent --kubeconfig FILE`), and returns
// its path.
func (s *Server) Kubeconfig(t testing.TB, u User) string {
	t.Helper()
	cfg := s.Config(t, u)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[u.Name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: u.Name}
	kc.CurrentContext = "kubetest"
	path := filepath.Join(s.Dir, "kubeconfig-"+strings.NewReplacer(":", "-", "/", "-").Replace(u.Name))
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("kubetest: write kubeconfig: %v", err)
	}
	return path
}

// StopAPIServer kills kube-apiserver (SIGKILL, as a crash would) and
// waits until it has exited.
func (s *Server) StopAPIServer(t testing.TB) {
	t.Helper()
	if err := s.apiserver.kill(); err != nil {
		t.Fatal(err)
	}
}

// StartAPIServer starts kube-apiserver again, on the same port, and waits
// until its /readyz answers ok (which needs etcd).
func (s *Server) StartAPIServer(t testing.TB) {
	t.Helper()
	begin := time.Now()
	if err := s.apiserver.start(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(s.apiserver, s.URL+"/readyz", s.tokens[Admin.Name]); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: kube-apiserver %s ready at %s in %v", KubernetesVersion, s.URL, time.Since(begin).Round(time.Millisecond))
}

// StopEtcd kills etcd (SIGKILL) and waits until it has exited. The API
// server keeps running and fails its requests until etcd is back.
func (s *Server) StopEtcd(t testing.TB) {
	t.Helper()
	if err := s.etcd.kill(); err != nil {
		t.Fatal(err)
	}
}

// StartEtcd starts etcd again with the same data directory and ports,
// and waits until it reports itself healthy.
func (s *Server) StartEtcd(t testing.TB) {
	t.Helper()
	begin := time.Now()
	if err := s.etcd.start(); err != nil {
		t.Fatal(err)
	}
	if err := s.waitReady(s.etcd, s.etcdURL+"/health", ""); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: etcd ready at %s in %v", s.etcdURL, time.Since(begin).Round(time.Millisecond))
}

// WaitReady waits until the API server's /readyz answers ok again, as it
// does once etcd is back after StopEtcd and StartEtcd.
func (s *Server) WaitReady(t testing.TB) {
	t.Helper()
	begin := time.Now()
	if err := s.waitReady(s.apiserver, s.URL+"/readyz", s.tokens[Admin.Name]); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubetest: kube-apiserver ready again in %v", time.Since(begin).Round(time.Millisecond))
}

// waitReady polls url until it answers 200, p exits or readyTimeout
// passes.
func (s *Server) waitReady(p *process, url, token string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.pki.caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "no answer yet"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("kubetest: %w", err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited():
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("kubetest: %s not ready after %v: %s\n%s", url, readyTimeout, last, p.logTail(40))
		case <-tick.C:
		}
	}
}

// stopAll kills both servers, the API server first.
func (s *Server) stopAll(t testing.TB) {
	for _, p := range []*process{s.apiserver, s.etcd} {
		if p == nil {
			continue
		}
		if err := p.kill(); err != nil {
			t.Error(err)
		}
	}
}
