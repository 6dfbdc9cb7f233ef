package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/rawh2"
	"github.com/cozystack/csi-clone-sidecar/test/syncbuf"
)

// binaryUnderTest is the sidecar binary relaying to the test driver, with
// its stderr kept.
type binaryUnderTest struct {
	cmd                *exec.Cmd
	relaySock, metrics string
	stderr             syncbuf.Buffer
}

func startBinary(t *testing.T, args ...string) *binaryUnderTest {
	t.Helper()
	dir := t.TempDir()
	drv, err := csidriver.Start(csidriver.Config{Endpoint: filepath.Join(dir, "driver.sock"), StateDir: filepath.Join(dir, "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	b := &binaryUnderTest{relaySock: filepath.Join(dir, "relay.sock")}
	endpoint := freePort(t)
	b.metrics = "http://" + endpoint + "/metrics"
	b.cmd = sidecarCmd(append([]string{"--csi-address=" + drv.SocketPath(), "--listen-address=" + b.relaySock,
		"--verdicts=false", "--http-endpoint=" + endpoint}, args...)...)
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.cmd.Process.Kill(); b.cmd.Wait() })
	waitHealthz(t, "http://"+endpoint+"/healthz", http.StatusOK, "ok")
	return b
}

func (b *binaryUnderTest) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+b.relaySock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (b *binaryUnderTest) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(b.metrics)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// A client that sends one request whose :path is not UTF-8 and hangs up
// before the answer, 50 times, then 200 requests for made-up methods: the
// binary keeps serving, the calls are counted under method_name="unknown",
// and no other method_name than the CSI methods ever appears.
func TestNonUTF8HangUpsLeaveTheBinaryServing(t *testing.T) {
	b := startBinary(t)
	paths := slices.Repeat([]string{"/csi.v1.Controller/\xff\xfeCreateVolume"}, 50)
	for i := range 200 {
		paths = append(paths, fmt.Sprintf("/attacker.Service/Method%d", i))
	}
	for _, p := range paths {
		req, err := rawh2.RequestHeaders(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := rawh2.SendAndHangUp(b.relaySock, req); err != nil {
			t.Fatalf("relay gone: %v (stderr: %s)", err, b.stderr.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := csi.NewIdentityClient(b.dial(t)).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{}); err != nil {
		t.Fatalf("a call after 50 hostile hang-ups: %v (stderr: %s)", err, b.stderr.String())
	}
	if b.cmd.ProcessState != nil {
		t.Fatalf("process exited: %v", b.cmd.ProcessState)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.scrape(t), `method_name="unknown"`) {
		if time.Now().After(deadline) {
			t.Fatal(`no csi_sidecar_operations_seconds{method_name="unknown"} for the hostile calls`)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range methodLabel.FindAllStringSubmatch(b.scrape(t), -1) {
		if !slices.Contains(sidecar.Methods(), m[1]) {
			t.Errorf("method_name %q is not a CSI method or %q", m[1], sidecar.MethodUnknown)
		}
	}
}

var methodLabel = regexp.MustCompile(`method_name="([^"]*)"`)

// A secret planted in every request's secrets reaches the driver, and
// neither an observation, the log at the highest verbosity, nor a metric.
func TestSecretsReachNoObservationLogOrMetric(t *testing.T) {
	const secret = "s3cr3t-planted-7f3a"
	obsLog := filepath.Join(t.TempDir(), "observations.jsonl")
	b := startBinary(t, "--v=10", "--observations-log="+obsLog)
	ctrl := csi.NewControllerClient(b.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	secrets := map[string]string{"password": secret, secret: "key-is-secret-too"}
	params := map[string]string{"csi.storage.k8s.io/pvc/name": "tmp-pvc-1", "csi.storage.k8s.io/pvc/namespace": "cozy-public"}
	mount := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	vol, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-secret-test", Parameters: params, Secrets: secrets,
		VolumeCapabilities: []*csi.VolumeCapability{mount}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	id := vol.GetVolume().GetVolumeId()
	ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, Secrets: secrets, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	ctrl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-secret-test", SourceVolumeId: id, Secrets: secrets})
	ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id, Secrets: secrets})

	observed := waitForFile(t, obsLog, "DeleteVolume")
	if !strings.Contains(observed, "pvc-secret-test") || !strings.Contains(observed, "tmp-pvc-1") {
		t.Fatalf("observations lack the calls; the test proves nothing: %s", observed)
	}
	for name, text := range map[string]string{"observations": observed, "log at --v=10": b.stderr.String(), "metrics": b.scrape(t)} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret reached the %s", name)
		}
	}
	if !strings.Contains(b.stderr.String(), "Relaying CSI calls") {
		t.Error("stderr holds no log at all; the test proves nothing")
	}
}

// waitForFile returns path's content once it contains want.
func waitForFile(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never contained %q: %s", path, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
