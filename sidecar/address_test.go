package sidecar_test

import (
	"strings"
	"testing"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

func TestSocketPath(t *testing.T) {
	ok := map[string]string{
		"/csi/csi.sock":         "/csi/csi.sock",
		"unix:///csi/csi.sock":  "/csi/csi.sock",
		"unix:/csi/csi.sock":    "/csi/csi.sock",
		"unix:///csi//x/../s":   "/csi/s",
		"/run/csi/socket":       "/run/csi/socket",
		"unix:///run/csi/sock2": "/run/csi/sock2",
	}
	for addr, want := range ok {
		got, err := sidecar.SocketPath(addr)
		if err != nil || got != want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	bad := map[string]string{
		"":                     "empty address",
		"tcp://host:1":         "not a unix socket",
		"dns:///csi.example":   "not a unix socket",
		"unix://":              "empty path",
		"unix:":                "empty path",
		"unix://csi/csi.sock":  "not an absolute path",
		"csi.sock":             "not an absolute path",
		"./csi/csi.sock":       "not an absolute path",
		"localhost:10000":      "not an absolute path",
		"unix-abstract:foobar": "not an absolute path",
	}
	for addr, want := range bad {
		got, err := sidecar.SocketPath(addr)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("SocketPath(%q) = %q, %v; want one line containing %q", addr, got, err, want)
		}
	}
}
