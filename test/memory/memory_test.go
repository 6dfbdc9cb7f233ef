// Package memory measures the memory of the real csi-clone-sidecar binary
// while it relays large replies: what it holds must stay within the bound
// the sidecar package documents (sidecar.HeldBytesBound), and must be given
// back once the connections close.
package memory_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

const (
	// replyBytes is the size of every ListVolumes reply (some 50,000
	// volumes), as large as the largest message the tap decodes.
	replyBytes = 4 << 20
	// runtimeAllowance is what the Go runtime may add on top of the bytes
	// the relay and tap hold. Most of it is the collector's headroom: with
	// GOGC=100 the heap grows to twice its live bytes before a collection,
	// so garbage (parsed frames, replaced buffers) may add as much again;
	// the rest is goroutine stacks and the runtime's metadata. Measured
	// (Go 1.26, 2 CPUs): the rewritten relay's peak growth here is 0-1.3
	// MiB; the tap before the rewrite, which kept every reply, grew 440-460
	// MiB. 16 MiB is ten times the first and far below the second.
	runtimeAllowance = 16 << 20
	// returnMargin is how far above the baseline the RSS may stay once the
	// connections closed: the runtime keeps some freed spans for reuse
	// (its scavenger returns memory only beyond ~10% over the heap goal).
	returnMargin = 8 << 20
	// returnWait bounds the wait for that. An idle Go process collects
	// only when forced, every two minutes, so the wait covers one forced
	// collection plus the scavenger's time to give the pages back.
	returnWait = 150 * time.Second
)

// The binary relaying concurrent ListVolumes calls, each answered with
// 4 MiB (a reply the tap never decodes), on one connection and on four:
// its peak RSS growth stays within sidecar.HeldBytesBound plus the runtime's
// allowance, and its RSS returns near the baseline once they close.
func TestRelayMemoryUnderLargeReplies(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Fatal("reads the process's RSS from /proc: Linux only")
	}
	bin := buildSidecar(t)
	for _, c := range []struct{ conns, streams int }{{1, 64}, {4, 16}} {
		t.Run(fmt.Sprintf("%d connections x %d streams", c.conns, c.streams), func(t *testing.T) {
			measureRelay(t, bin, c.conns, c.streams)
		})
	}
}

func measureRelay(t *testing.T, bin string, conns, streams int) {
	dir := t.TempDir()
	driverSock, relaySock := filepath.Join(dir, "driver.sock"), filepath.Join(dir, "relay.sock")
	startDriver(t, driverSock)
	pid := startSidecar(t, bin, driverSock, relaySock)
	clients := dialRelay(t, relaySock, conns)
	for range 3 { // warm-up: every connection, buffer and code path once
		callAll(t, clients, 1, 0)
	}
	time.Sleep(time.Second) // the binary's own start-up calls (the driver's name) are done
	base := mustKB(t, pid, "VmRSS")
	peak := peakDuring(t, pid, func() { callAll(t, clients, streams, conns*streams) })
	growth, bound := peak-base, sidecar.HeldBytesBound(conns, streams)+runtimeAllowance
	t.Logf("RSS baseline %.1f MiB, peak %.1f MiB: growth %.1f MiB; HeldBytesBound(%d, %d) %.1f MiB + runtime allowance %.1f MiB",
		mib(base), mib(peak), mib(growth), conns, streams, mib(sidecar.HeldBytesBound(conns, streams)), mib(runtimeAllowance))
	if growth > bound {
		t.Errorf("peak RSS grew by %.1f MiB, more than the %.1f MiB bound", mib(growth), mib(bound))
	}
	for _, c := range clients {
		c.Close()
	}
	returned, after := waitForRSS(t, pid, base+returnMargin)
	t.Logf("after closing: RSS %.1f MiB after %v", mib(after), returned.Round(100*time.Millisecond))
	if after > base+returnMargin {
		t.Errorf("RSS still %.1f MiB %v after the connections closed; baseline %.1f MiB", mib(after), returnWait, mib(base))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// buildSidecar builds the binary from this checkout.
func buildSidecar(t *testing.T) string {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("go not in PATH: the test builds the binary with it")
	}
	bin := filepath.Join(t.TempDir(), "csi-clone-sidecar")
	cmd := exec.Command(gobin, "build", "-o", bin, "github.com/cozystack/csi-clone-sidecar/cmd/csi-clone-sidecar")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startSidecar runs the binary relaying relaySock to driverSock, with no
// verdicts and no HTTP endpoint, and waits until the relay accepts. The
// observations log stands in for the verdict engine: with no one reading
// observations the tap keeps no message at all, so without it the test
// would not measure what the tap buffers in production.
func startSidecar(t *testing.T, bin, driverSock, relaySock string) int {
	cmd := exec.Command(bin, "--csi-address", driverSock, "--listen-address", relaySock, "--verdicts=false",
		"--observations-log", filepath.Join(filepath.Dir(relaySock), "observations.jsonl"))
	var logs strings.Builder // read only after Wait, which ends the copying
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("csi-clone-sidecar's log:\n%s", logs.String())
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", relaySock); err == nil {
			c.Close()
			return cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay did not listen within 10s")
		}
	}
}

func dialRelay(t *testing.T, sock string, n int) []*grpc.ClientConn {
	var out []*grpc.ClientConn
	for range n {
		c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(2*replyBytes)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// callAll makes streams concurrent ListVolumes calls on every connection.
// With gate > 0 the driver answers none before gate calls arrived, so that
// all of them are open at once.
func callAll(t *testing.T, clients []*grpc.ClientConn, streams, gate int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(clients)*streams)
	for _, c := range clients {
		client := csi.NewControllerClient(c)
		for range streams {
			wg.Go(func() {
				resp, err := client.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: int32(gate)})
				if err == nil && proto.Size(resp) < replyBytes {
					err = fmt.Errorf("reply of %d bytes", proto.Size(resp))
				}
				errs <- err
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("ListVolumes through the relay: %v", err)
		}
	}
}

// controller answers ListVolumes with one prebuilt reply of replyBytes.
type controller struct {
	csi.UnimplementedControllerServer
	csi.UnimplementedIdentityServer
	reply *csi.ListVolumesResponse

	mu      sync.Mutex
	arrived int
	all     chan struct{}
}

func newController() *controller {
	c := &controller{reply: &csi.ListVolumesResponse{}, all: make(chan struct{})}
	entry := func(i int) *csi.ListVolumesResponse_Entry {
		return &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: fmt.Sprintf("pvc-%060d", i), CapacityBytes: 1 << 40}}
	}
	// Entries are all of one size: size the reply from the first.
	n := replyBytes/proto.Size(&csi.ListVolumesResponse{Entries: []*csi.ListVolumesResponse_Entry{entry(0)}}) + 1
	for i := range n {
		c.reply.Entries = append(c.reply.Entries, entry(i))
	}
	return c
}

// ListVolumes answers at once, or, when MaxEntries names a gate, once that
// many gated calls arrived.
func (c *controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if n := int(req.GetMaxEntries()); n > 0 {
		c.mu.Lock()
		if c.arrived++; c.arrived == n {
			close(c.all)
		}
		c.mu.Unlock()
		select {
		case <-c.all:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(30 * time.Second):
			return nil, status.Errorf(codes.DeadlineExceeded, "not all of the %d calls arrived", n)
		}
	}
	return c.reply, nil
}

// GetPluginInfo answers the binary, which asks for the driver's name.
func (c *controller) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: "memory.test.csi", VendorVersion: "1"}, nil
}

func startDriver(t *testing.T, sock string) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	c := newController()
	csi.RegisterControllerServer(srv, c)
	csi.RegisterIdentityServer(srv, c)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
}

// procKB reads one "<field>: <n> kB" line of /proc/<pid>/status, in bytes.
func procKB(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if name, value, ok := strings.Cut(s.Text(), ":"); ok && name == field {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func mustKB(t *testing.T, pid int, field string) int64 {
	v, err := procKB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// peakDuring returns the highest RSS of the process while load runs: its
// VmHWM, reset first (Linux 4.0+), or where that cannot be reset, the
// highest RSS seen by polling every few milliseconds.
func peakDuring(t *testing.T, pid int, load func()) int64 {
	hwm := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
	var sampled atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if v, err := procKB(pid, "VmRSS"); err == nil && v > sampled.Load() {
				sampled.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	load()
	close(done)
	wg.Wait()
	if !hwm {
		t.Log("cannot reset VmHWM; the peak is the highest RSS polled")
		return sampled.Load()
	}
	return max(sampled.Load(), mustKB(t, pid, "VmHWM"))
}

// waitForRSS polls the RSS until it is at most limit or returnWait passed;
// it returns how long that took and the last RSS.
func waitForRSS(t *testing.T, pid int, limit int64) (time.Duration, int64) {
	start := time.Now()
	for {
		rss := mustKB(t, pid, "VmRSS")
		if rss <= limit || time.Since(start) > returnWait {
			return time.Since(start), rss
		}
		time.Sleep(200 * time.Millisecond)
	}
}
