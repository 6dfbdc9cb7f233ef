package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// controller is the driver every mode talks to. It is stateless and answers
// from the request alone, so its cost is small and the same whether a call
// came straight from the client or through a relay: what differs between
// modes is then the relay. test/csidriver would add file I/O and state that
// grows as calls repeat, i.e. noise that is not the relay's.
type controller struct {
	csi.UnimplementedControllerServer
}

var capabilities = &csi.ControllerGetCapabilitiesResponse{
	Capabilities: []*csi.ControllerServiceCapability{
		rpcCapability(csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME),
		rpcCapability(csi.ControllerServiceCapability_RPC_CLONE_VOLUME),
		rpcCapability(csi.ControllerServiceCapability_RPC_EXPAND_VOLUME),
	},
}

func rpcCapability(t csi.ControllerServiceCapability_RPC_Type) *csi.ControllerServiceCapability {
	return &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
		Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
	}}
}

func (controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return capabilities, nil
}

// CreateVolume answers as a driver does for a clone: the volume it made, at
// the requested size, naming its source. Like real drivers it does not echo
// the parameters back, so the response stays small in every kind.
func (controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      volumeID(req.GetName()),
		CapacityBytes: req.GetCapacityRange().GetRequiredBytes(),
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

func volumeID(name string) string { return "vol-" + name }

// stack is the driver and the two relays (the tapped one and the bare
// one), each on its own socket in a private directory; the relays run in
// a process of their own unless inProcess.
type stack struct {
	dir                  string
	driver, tapped, bare string
	server               *grpc.Server
	relays               []*sidecar.Relay // in-process relays
	served               sync.WaitGroup
	process              *relayProcess
	tally                *tally
}

// stackIn names the sockets of a stack in dir.
func stackIn(dir string) *stack {
	return &stack{dir: dir, driver: filepath.Join(dir, "driver.sock"),
		tapped: filepath.Join(dir, "tapped.sock"), bare: filepath.Join(dir, "bare.sock")}
}

// startStack starts the driver and both relays; the tapped relay hands its
// observations to t and its timings to a real metrics Recorder, as the
// binary does.
func startStack(t *tally, inProcess bool) (*stack, error) {
	dir, err := os.MkdirTemp("", "csi-clone-bench-")
	if err != nil {
		return nil, err
	}
	s := stackIn(dir)
	s.tally = t
	lis, err := net.Listen("unix", s.driver)
	if err != nil {
		s.stop()
		return nil, err
	}
	s.server = grpc.NewServer()
	csi.RegisterControllerServer(s.server, controller{})
	go s.server.Serve(lis)
	if !inProcess {
		s.process, err = startRelayProcess(dir)
		if err != nil {
			s.stop()
			return nil, err
		}
		return s, nil
	}
	if s.relays, err = startRelays(s, t); err != nil {
		s.stop()
		return nil, err
	}
	for _, relay := range s.relays {
		s.served.Go(func() { relay.Serve(context.Background()) })
	}
	return s, nil
}

// measureOn starts a stack whose tap reports to t, dials every mode and
// runs measure on them. Then the clients hang up, so the relays see orderly
// ends and nobody redials a closing relay, and the relays close, so t has
// counted every observation by the time it returns.
func measureOn(o options, t *tally, measure func([]*mode) error) error {
	s, err := startStack(t, o.inProcess)
	if err != nil {
		return err
	}
	defer s.stop()
	modes, err := dialModes(s)
	if err != nil {
		return err
	}
	err = measure(modes)
	closeModes(modes)
	if err != nil {
		return err
	}
	return s.closeRelays()
}

// closeRelays closes both relays; Close returns once the tap has delivered
// what it decoded, so the tally's counts are final afterwards.
func (s *stack) closeRelays() error {
	var errs []error
	if s.process != nil {
		errs = append(errs, s.process.close(s.tally))
		s.process = nil
	}
	for _, r := range s.relays {
		errs = append(errs, r.Close())
	}
	s.relays = nil
	s.served.Wait()
	return errors.Join(errs...)
}

func (s *stack) stop() {
	if s.process != nil {
		s.process.kill()
		s.process = nil
	}
	s.closeRelays()
	if s.server != nil {
		s.server.Stop()
	}
	os.RemoveAll(s.dir)
}
