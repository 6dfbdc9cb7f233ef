package csidriver_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
	"github.com/cozystack/csi-clone-sidecar/test/syncbuf"
)

// klogBuffer collects klog output written from the server's goroutines;
// reading it flushes klog first.
type klogBuffer struct{ syncbuf.Buffer }

func (b *klogBuffer) String() string {
	klog.Flush()
	return b.Buffer.String()
}

// captureKlog sends klog (at -v=5) to a buffer for the rest of the test.
func captureKlog(t *testing.T) *klogBuffer {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	buf := &klogBuffer{}
	for k, v := range map[string]string{"logtostderr": "false", "alsologtostderr": "false", "stderrthreshold": "FATAL", "v": "5"} {
		if err := fs.Set(k, v); err != nil {
			t.Fatal(err)
		}
	}
	klog.SetOutput(buf)
	t.Cleanup(func() {
		klog.Flush()
		_ = fs.Set("v", "0")
		_ = fs.Set("logtostderr", "true")
		klog.SetOutput(os.Stderr)
	})
	return buf
}

// TestInjectedFaults: --fail answers a method with the code, --delay holds
// it (bounded by the caller's deadline); other methods are untouched.
func TestInjectedFaults(t *testing.T) {
	h := newHarness(t, csidriver.Config{Faults: csidriver.Faults{
		Fail:  map[string]codes.Code{"ControllerExpandVolume": codes.Unavailable},
		Delay: map[string]time.Duration{"CreateSnapshot": time.Hour},
	}})
	h.mustCreate(createReq("v", "", mib))
	_, err := h.ctl.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * mib}})
	wantCode(t, err, codes.Unavailable, "injected failure")
	if !strings.Contains(status.Convert(err).Message(), "injected") {
		t.Errorf("message %q does not say the failure is injected", status.Convert(err).Message())
	}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = h.ctl.CreateSnapshot(short, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v"})
	wantCode(t, err, codes.DeadlineExceeded, "delayed call past its deadline")
	if _, err := h.ctl.ListSnapshots(ctx(t), &csi.ListSnapshotsRequest{}); err != nil {
		t.Errorf("a method without faults failed: %v", err)
	}
}

// TestFailClones: --fail-clones=ResourceExhausted:3 answers the first three
// CreateVolume calls that clone a volume with the code, then clones; a
// blank CreateVolume is never failed.
func TestFailClones(t *testing.T) {
	h := newHarness(t, csidriver.Config{Faults: csidriver.Faults{
		FailClones: csidriver.FailFirst{Code: codes.ResourceExhausted, Times: 3}}})
	h.mustCreate(createReq("golden", "", mib))
	clone := createReq("clone", "", mib)
	clone.VolumeContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
		Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: "golden"}}}
	for i := range 3 {
		_, err := h.ctl.CreateVolume(ctx(t), clone)
		wantCode(t, err, codes.ResourceExhausted, fmt.Sprintf("clone attempt %d of 3", i+1))
		h.mustCreate(createReq(fmt.Sprintf("blank-%d", i), "", mib))
	}
	if v := h.mustCreate(clone); v.GetContentSource().GetVolume().GetVolumeId() != "golden" {
		t.Fatalf("fourth attempt: %v, want the clone of golden", v)
	}
}

// TestExitAfter: the driver answers N calls, then stops; the next call
// finds no driver.
func TestExitAfter(t *testing.T) {
	exited := make(chan struct{})
	h := newHarness(t, csidriver.Config{
		Faults:      csidriver.Faults{ExitAfter: 3},
		OnExitAfter: func() { close(exited) },
	})
	for i := range 3 {
		if _, err := h.id.Probe(ctx(t), &csi.ProbeRequest{}); err != nil {
			t.Fatalf("call %d of 3: %v", i+1, err)
		}
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("driver did not stop after 3 calls")
	}
	<-h.d.Done()
	_, err := h.id.Probe(ctx(t), &csi.ProbeRequest{})
	wantCode(t, err, codes.Unavailable, "call after exit")
	if _, err := os.Stat(h.d.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("socket still there after exit: %v", err)
	}
}

// TestSecretsNeverLogged: with full request logging on (-v=5) no secret
// value reaches the log, while the call itself is logged.
func TestSecretsNeverLogged(t *testing.T) {
	logs := captureKlog(t)
	h := newHarness(t, csidriver.Config{})
	secrets := map[string]string{"password": "hunter2-do-not-log"}
	req := createReq("v", "", mib)
	req.Secrets = secrets
	h.mustCreate(req)
	if _, err := h.ctl.CreateSnapshot(ctx(t), &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: "v", Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.ControllerExpandVolume(ctx(t), &csi.ControllerExpandVolumeRequest{
		VolumeId: "v", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 * mib}, Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.DeleteVolume(ctx(t), &csi.DeleteVolumeRequest{VolumeId: "v", Secrets: secrets}); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{`method="CreateVolume"`, `method="CreateSnapshot"`, `method="ControllerExpandVolume"`, `"CSI request"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Error("a secret value was logged")
	}
}

// TestHangLogsDeadlineExceeded: the hung clone logs what LINSTOR logs when
// the provisioner's deadline passes.
func TestHangLogsDeadlineExceeded(t *testing.T) {
	logs := captureKlog(t)
	h := newHarness(t, csidriver.Config{Pools: threePools})
	h.mustCreate(createReq("golden", "replicated", mib))
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.ctl.CreateVolume(short, fromVolume(createReq("w", "local", mib), "golden"))
	wantCode(t, err, codes.DeadlineExceeded, "hung clone")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "context deadline exceeded") {
		if time.Now().After(deadline) {
			t.Fatalf("driver never logged \"context deadline exceeded\"; log:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
