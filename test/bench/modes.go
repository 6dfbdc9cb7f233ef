package main

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The modes, in the order reports list them; rounds run them shuffled.
const (
	direct = iota
	tapped
	bare
)

// mode is one way of reaching the driver, over one gRPC client connection
// kept for the whole run, as a kubernetes-csi sidecar keeps its own.
type mode struct {
	name   string
	conn   *grpc.ClientConn
	client csi.ControllerClient
	dials  atomic.Int64 // connections opened; 1 unless something broke one
}

// dialModes connects to the driver directly, through the tapped relay and
// through the bare relay.
func dialModes(s *stack) ([]*mode, error) {
	var modes []*mode
	for _, t := range []struct{ name, sock string }{
		{"direct", s.driver}, {"relay+tap", s.tapped}, {"bare relay", s.bare},
	} {
		m, err := dial(t.name, t.sock)
		if err != nil {
			closeModes(modes)
			return nil, err
		}
		modes = append(modes, m)
	}
	return modes, nil
}

func dial(name, sock string) (*mode, error) {
	m := &mode{name: name}
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		m.dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "unix", addr)
	}
	// passthrough hands the path to the counting dialer unchanged.
	conn, err := grpc.NewClient("passthrough:///"+sock, grpc.WithContextDialer(dialer),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	m.conn, m.client = conn, csi.NewControllerClient(conn)
	return m, nil
}

func closeModes(modes []*mode) {
	for _, m := range modes {
		m.conn.Close()
	}
}
