package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

// TestMain lets the tests run this binary's main in a child process.
func TestMain(m *testing.M) {
	if os.Getenv("CSI_CLONE_SIDECAR_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func sidecarCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CSI_CLONE_SIDECAR_MAIN=1")
	return cmd
}

func TestBadFlagsExitWithOneLine(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]string{
		"listen-address is required":                             {},
		"not an octal permission":                                {"--listen-address=" + dir + "/s", "--listen-socket-mode=0999"},
		"--stuck-after must be positive":                         {"--listen-address=" + dir + "/s", "--ledger-namespace=ns", "--stuck-after=0s"},
		"--evidence-grace must not be negative":                  {"--listen-address=" + dir + "/s", "--ledger-namespace=ns", "--evidence-grace=-1s"},
		"POD_NAMESPACE is not set":                               {"--listen-address=" + dir + "/s"},
		`--csi-address: "tcp://host:1" is not a unix socket`:     {"--listen-address=" + dir + "/s", "--csi-address=tcp://host:1"},
		`--listen-address: "unix://" has an empty path`:          {"--listen-address=unix://"},
		`--listen-address: "relay.sock" is not an absolute path`: {"--listen-address=relay.sock"},
		"--health-probe-interval must be positive, got 0s":       {"--listen-address=" + dir + "/s", "--health-probe-interval=0"},
		"--enable-pprof needs --http-endpoint":                   {"--listen-address=" + dir + "/s", "--enable-pprof"},
	}
	for want, args := range cases {
		cmd := sidecarCmd(args...)
		cmd.Env = append(cmd.Env, "POD_NAMESPACE=")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], want) {
			t.Errorf("%v: want one line containing %q, got %q", args, want, out)
		}
	}
}

// TestListensBeforeTheAPIServerAnswers: the CSI sidecars give up on a socket
// that is not there, so the relay must listen before the verdict engine
// waits for Kubernetes. The API server here accepts and never answers.
func TestListensBeforeTheAPIServerAnswers(t *testing.T) {
	dir := t.TempDir()
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	go func() {
		for {
			c, err := api.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold the connection, answer nothing
		}
	}()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://`+api.Addr().String()+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600)
	sock := filepath.Join(dir, "relay.sock")
	cmd := sidecarCmd("--listen-address="+sock, "--csi-address="+filepath.Join(dir, "driver.sock"),
		"--kubeconfig="+kubeconfig, "--ledger-namespace=cozy-linstor", "--leader-election")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(sock); err == nil {
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
				t.Fatalf("listen address is %v, want a socket with mode 0660", fi.Mode())
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no socket while the API server is unresponsive: the relay waits for Kubernetes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHealthz polls url until it answers code with a body containing want.
func waitHealthz(t *testing.T, url string, code int, want string) {
	t.Helper()
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
			if resp.StatusCode == code && strings.Contains(string(body), want) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s = %q; want %d with %q", url, last, code, want)
}

// TestUnixURLAddressesAndHealthz runs the binary with both sockets given as
// unix:// URLs: a call goes through the relay to the driver; /readyz and
// csi_clone_driver_ready follow the driver (ok while it answers Probe, 503
// with the reason once it is gone) while /healthz, the liveness probe's,
// stays ok: a restart of the relay would heal no driver.
func TestUnixURLAddressesAndHealthz(t *testing.T) {
	dir := t.TempDir()
	drv, err := csidriver.Start(csidriver.Config{Endpoint: filepath.Join(dir, "driver.sock"), StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Stop()
	relaySock, endpoint := filepath.Join(dir, "relay.sock"), freePort(t)
	cmd := sidecarCmd("--csi-address=unix://"+drv.SocketPath(), "--listen-address=unix://"+relaySock,
		"--verdicts=false", "--http-endpoint="+endpoint, "--health-probe-interval=500ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	healthz, readyz := "http://"+endpoint+"/healthz", "http://"+endpoint+"/readyz"
	waitHealthz(t, readyz, http.StatusOK, "ok")
	waitHealthz(t, healthz, http.StatusOK, "ok")
	waitHealthz(t, "http://"+endpoint+"/metrics", http.StatusOK, "\ncsi_clone_driver_ready 1\n")

	conn, err := grpc.NewClient("unix://"+relaySock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
	if err != nil || info.GetName() != csidriver.DefaultDriverName {
		t.Fatalf("GetPluginInfo through the relay = %v, %v", info, err)
	}

	drv.Stop()
	waitHealthz(t, readyz, http.StatusServiceUnavailable, "driver at "+drv.SocketPath()+" did not answer Probe since")
	waitHealthz(t, "http://"+endpoint+"/metrics", http.StatusOK, "\ncsi_clone_driver_ready 0\n")
	// The probe has seen the driver gone; liveness must not have.
	waitHealthz(t, healthz, http.StatusOK, "ok")
}

// The container's memory limit, as the downward API gives it in deploy/,
// becomes the collector's soft limit at 90 %; GOMEMLIMIT wins over it, and a
// value that is not a byte count is refused at start.
func TestMemoryLimitFromTheDownwardAPI(t *testing.T) {
	dir := t.TempDir()
	bad := sidecarCmd("--listen-address=" + dir + "/s")
	bad.Env = append(bad.Env, "MEMORY_LIMIT=64Mi")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "want the container's memory limit in bytes") {
		t.Errorf("MEMORY_LIMIT=64Mi: want a refusal, got %v: %s", err, out)
	}
	t.Setenv("MEMORY_LIMIT", "1073741824")
	// The line comes before the relay listens, and startBinary waits for
	// /healthz.
	if log := startBinary(t, "--v=2").stderr.String(); !strings.Contains(log, "soft memory limit") || !strings.Contains(log, "bytes=966367641") {
		t.Errorf("want a soft limit of 90 %% of 1 GiB, log: %s", log)
	}
	t.Setenv("GOMEMLIMIT", "500MiB")
	if log := startBinary(t, "--v=2").stderr.String(); strings.Contains(log, "soft memory limit") {
		t.Errorf("GOMEMLIMIT set: want the runtime's own limit kept, log: %s", log)
	}
}
