package sidecar

import (
	"fmt"
	"path/filepath"
	"strings"
)

// SocketPath returns the filesystem path of a unix socket address written as
// a bare absolute path (/csi/csi.sock) or in gRPC's unix forms
// (unix:///csi/csi.sock, unix:/csi/csi.sock), the forms the kubernetes-csi
// sidecars accept for --csi-address. Anything else is an error saying why:
// the relay only speaks unix sockets, and a relative path would depend on
// the working directory of whoever else dials it.
func SocketPath(addr string) (string, error) {
	p, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		p, ok = strings.CutPrefix(addr, "unix:")
	}
	switch {
	case addr == "":
		return "", fmt.Errorf("empty address (want /path/to/socket or unix:///path/to/socket)")
	case ok && p == "":
		return "", fmt.Errorf("%q has an empty path (want unix:///path/to/socket)", addr)
	case !ok && strings.Contains(addr, "://"):
		return "", fmt.Errorf("%q is not a unix socket: only /path/to/socket or unix:///path/to/socket is supported", addr)
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("%q is not an absolute path (want /path/to/socket or unix:///path/to/socket)", addr)
	}
	return filepath.Clean(p), nil
}
