package sidecar

import (
	"github.com/container-storage-interface/spec/lib/go/csi"
)

// MethodUnknown stands for every :path that is not a method of the CSI spec.
// A peer chooses :path freely; only a closed set may reach a metric label or
// an observation, or one client could make the label set grow without bound
// (or, with bytes that are not UTF-8, make the metrics library panic).
const MethodUnknown = "unknown"

// csiMethods maps every full gRPC method of every service in csi.proto to
// itself. It is built from the spec's own descriptors, so a new CSI release
// brings its methods with it.
var csiMethods = func() map[string]string {
	m := map[string]string{}
	services := csi.File_csi_proto.Services()
	for i := 0; i < services.Len(); i++ {
		s := services.Get(i)
		for j := 0; j < s.Methods().Len(); j++ {
			name := "/" + string(s.FullName()) + "/" + string(s.Methods().Get(j).Name())
			m[name] = name
		}
	}
	return m
}()

// CanonicalMethod returns path when it is a CSI method, else MethodUnknown.
// The result is one of a fixed set of strings, never the peer's bytes.
func CanonicalMethod(path string) string {
	if m, ok := csiMethods[path]; ok {
		return m
	}
	return MethodUnknown
}

// Methods returns every value CanonicalMethod can return.
func Methods() []string {
	out := make([]string, 0, len(csiMethods)+1)
	for m := range csiMethods {
		out = append(out, m)
	}
	return append(out, MethodUnknown)
}
