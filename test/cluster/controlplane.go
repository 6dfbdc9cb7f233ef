package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// Controllers of kube-controller-manager the storage flow needs: binding and
// the two protection controllers (without them a deleted PVC never goes away
// and a PV can be deleted under a claim), and the serviceaccount controller
// (pods CDI creates need the namespace's "default" ServiceAccount, which the
// ServiceAccount admission plugin checks).
var defaultControllers = []string{
	"persistentvolume-binder-controller",
	"persistentvolume-protection-controller",
	"persistentvolumeclaim-protection-controller",
	"serviceaccount-controller",
}

// freePort asks the kernel for a free loopback TCP port. The stack runs in a
// network namespace of its own, so the window between close and reuse is only
// ever raced by this test process.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeLoopbackAddr is "127.0.0.1:<free port>", for a component a test adds
// with StartComponent (Prometheus, VictoriaMetrics).
func FreeLoopbackAddr() (string, error) {
	port, err := freePort()
	return fmt.Sprintf("127.0.0.1:%d", port), err
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startEtcd starts a single-member etcd on loopback with fsync off (the data
// lives only as long as the test).
func (c *Cluster) startEtcd(clientPort, peerPort int) (string, error) {
	bin, err := tools.Bin("etcd")
	if err != nil {
		return "", err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", clientPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	_, err = c.start("etcd", nil, bin,
		"--name=e2e",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer,
		"--initial-cluster=e2e="+peer,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return "", err
	}
	return client, c.waitHTTP("etcd", client+"/health", nil, 60*time.Second)
}

// startAPIServer starts kube-apiserver on 127.0.0.1 with token authentication,
// RBAC, and service-account token signing, and waits for /readyz.
func (c *Cluster) startAPIServer(etcdURL string, port int) error {
	bin, err := tools.Bin("kube-apiserver")
	if err != nil {
		return err
	}
	p := c.pki
	policy, err := c.writeAuditPolicy()
	if err != nil {
		return err
	}
	_, err = c.start("kube-apiserver", nil, bin,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(c.Dir, "pki", "apiserver"),
		"--tls-cert-file="+p.servingCert,
		"--tls-private-key-file="+p.servingKey,
		"--token-auth-file="+p.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-key-file="+p.saPub,
		"--service-account-signing-key-file="+p.saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--api-audiences=https://kubernetes.default.svc",
		// ClusterIPs are only allocated (CDI creates a Service for its upload
		// pod); nothing routes to them.
		"--service-cluster-ip-range=10.96.0.0/24",
		// The "kubernetes" Service would advertise a loopback endpoint.
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--audit-policy-file="+policy,
		"--audit-log-path="+c.AuditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--profiling=false",
		"--v=1",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP("kube-apiserver", c.Host+"/readyz", c.apiTLS(), 90*time.Second)
}

// startControllerManager starts kube-controller-manager with only the
// controllers the storage flow needs (plus opts.ExtraControllers).
func (c *Cluster) startControllerManager(port int) error {
	ctrls := append(append([]string(nil), defaultControllers...), c.opts.ExtraControllers...)
	if c.needsScheduler() {
		ctrls = append(ctrls, schedulingControllers...)
	}
	return c.startKubeComponent("kube-controller-manager", "kcm", port,
		"--controllers="+strings.Join(ctrls, ","),
		// The binder also acts on a periodic resync; CDI's rebind of a PV to
		// the target claim waits on it. 15s by default: only slower.
		"--pvclaimbinder-sync-period=2s",
		"--use-service-account-credentials=false",
		"--v=1",
	)
}

// startKubeComponent starts kube-controller-manager or kube-scheduler as the
// admin, alone (no leader election), serving its /healthz on loopback port
// with a throwaway certificate in pki/<certDir>, and waits for it.
func (c *Cluster) startKubeComponent(name, certDir string, port int, args ...string) error {
	bin, err := tools.Bin(name)
	if err != nil {
		return err
	}
	common := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, "pki", certDir),
	}
	if _, err := c.start(name, nil, bin, append(common, args...)...); err != nil {
		return err
	}
	insecure := &tls.Config{InsecureSkipVerify: true} // its own throwaway self-signed cert on loopback
	return c.waitHTTP(name, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecure, 60*time.Second)
}

// apiTLS trusts only this cluster's CA.
func (c *Cluster) apiTLS() *tls.Config {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.pki.caPEM)
	return &tls.Config{RootCAs: pool}
}

// waitHTTP polls url until it answers 200, the component exits, or timeout.
func (c *Cluster) waitHTTP(name, url string, tlsConf *tls.Config, timeout time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if strings.HasPrefix(url, c.Host) && c.pki != nil {
			req.Header.Set("Authorization", "Bearer "+c.pki.adminToken)
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if err := c.procs[name].failure(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s (last: %s); log: %s", name, url, timeout, last, c.procs[name].log)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// writeKubeconfig writes a self-contained admin kubeconfig (CA and token
// inline) so that a process in another mount namespace can use a copy of it.
func (c *Cluster) writeKubeconfig(path string) error {
	return os.WriteFile(path, kubeconfig(c.Host, c.pki.caPEM, "admin", c.pki.adminToken), 0o600)
}

// kubeconfig is a self-contained kubeconfig authenticating with a bearer token.
func kubeconfig(host string, caPEM []byte, user, token string) []byte {
	const tmpl = `apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: e2e
  context: {cluster: e2e, user: %s}
current-context: e2e
`
	return fmt.Appendf(nil, tmpl, host, base64Std(caPEM), user, token, user)
}
