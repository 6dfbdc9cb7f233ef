package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cozystack/csi-clone-sidecar/test/csidriver"
)

// The test binary doubles as the driver binary: with this variable set it
// runs main() with its arguments, so exit statuses are real.
const runMainEnv = "CSI_TEST_DRIVER_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func driverCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err == nil {
		return 0
	}
	return -1
}

// TestBadFlags: every bad value exits 2 with one line naming the problem.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--pool=a:foo", "node-local"},
		{"--pool=a --pool=a", "given twice"},
		{"--pool=bad/name", "pool name"},
		{"--default-pool=b --pool=a", "default pool"},
		{"--capacity=zz=1Gi", "no --pool defines"},
		{"--capacity=default=lots", "capacity"},
		{"--delay=Foo=1s", "unknown CSI method"},
		{"--delay=CreateVolume=soon", "duration"},
		{"--fail=CreateVolume=Nope", "unknown gRPC code"},
		{"--fail=CreateVolume=OK", "not a failure"},
		{"--fail-clones=ResourceExhausted", "CODE:N"},
		{"--fail-clones=ResourceExhausted:0", "CODE:N"},
		{"--fail-clones=Nope:3", "unknown gRPC code"},
		{"--exit-after=-1", "negative"},
		{"--node-local-clone=maybe", "hang"},
		{"--endpoint=tcp://127.0.0.1:1", "unix"},
		{"--endpoint=relative.sock", "absolute"},
		{"--v=loud", "-v"},
		{"--nosuch", "not defined"},
		{"stray", "unexpected argument"},
	} {
		args := append([]string{"--state-dir=" + t.TempDir()}, strings.Fields(tc.args)...)
		var stderr bytes.Buffer
		cmd := driverCmd(args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		out := strings.TrimSpace(stderr.String())
		if exitStatus(err) != 2 || strings.Count(out, "\n") != 0 || !strings.Contains(out, tc.want) ||
			!strings.HasPrefix(out, "csi-test-driver: ") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and one line containing %q", tc.args, exitStatus(err), out, tc.want)
		}
	}
}

// TestBinary runs the real binary: it replaces a stale socket, serves the
// configured pools and faults, and exits with ExitAfterStatus after
// --exit-after calls.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "csi.sock")
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close() // leaves the socket file behind, as a crashed driver does

	var logs bytes.Buffer
	cmd := driverCmd("--endpoint=unix://"+sock, "--state-dir="+filepath.Join(dir, "state"), "--drivername=linstor.test",
		"--pool=replicated", "--pool=local:node-local", "--capacity=replicated=1Gi", "--node-local-clone=fail",
		"--fail=ControllerExpandVolume=Unavailable", "--exit-after=4")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := csi.NewIdentityClient(conn).GetPluginInfo(c, &csi.GetPluginInfoRequest{}, grpc.WaitForReady(true))
	if err != nil || info.GetName() != "linstor.test" {
		t.Fatalf("GetPluginInfo: %v, %v", info, err)
	}
	ctl := csi.NewControllerClient(conn)
	vol, err := ctl.CreateVolume(c, &csi.CreateVolumeRequest{Name: "golden", CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20},
		VolumeCapabilities: []*csi.VolumeCapability{{
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
			AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}}})
	if err != nil || vol.GetVolume().GetVolumeContext()[csidriver.PoolParameter] != "replicated" {
		t.Fatalf("CreateVolume in the default pool: %v, %v", vol, err)
	}
	capResp, err := ctl.GetCapacity(c, &csi.GetCapacityRequest{})
	if err != nil || capResp.GetAvailableCapacity() != 1<<30-1<<20 {
		t.Errorf("GetCapacity: %v, %v; want 1GiB - 1MiB", capResp, err)
	}
	_, err = ctl.ControllerExpandVolume(c, &csi.ControllerExpandVolumeRequest{VolumeId: "golden", CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ControllerExpandVolume with --fail: %v, want Unavailable", err)
	}
	select {
	case err := <-exited:
		if exitStatus(err) != csidriver.ExitAfterStatus {
			t.Errorf("exit status %d, want %d; log:\n%s", exitStatus(err), csidriver.ExitAfterStatus, logs.String())
		}
	case <-c.Done():
		t.Fatalf("binary did not exit after 4 calls; log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"CSI call" method="CreateVolume" name="golden"`) {
		t.Errorf("calls are not logged; log:\n%s", logs.String())
	}
}
