package sidecar_test

import (
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// BenchmarkTapSession is the tap's own cost, without sockets: one recorded
// connection (preface, settings, four unary calls with their answers) fed to
// a fresh TapConn per iteration, each direction in one piece, as the relay
// would after forwarding it.
func BenchmarkTapSession(b *testing.B) {
	s := recordSession(b, false, false)
	tap := sidecar.NewTap(sidecar.ObserverFunc(func(sidecar.Observation) {}), nil, 1024)
	defer tap.Close()
	at := time.Now()
	b.SetBytes(int64(len(s.clientSent) + len(s.driverSent)))
	b.ReportAllocs()
	for b.Loop() {
		tc := tap.NewConn()
		tc.FromClient().Feed(s.clientSent, at)
		tc.FromDriver().Feed(s.driverSent, at)
		tc.Close()
	}
}
