package sidecar_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// FuzzTap feeds arbitrary client and driver byte streams to the tap. The tap
// must neither panic (its recover would report "panic") nor hang, whatever
// it is fed, and must never report an observation carrying the secret.
func FuzzTap(f *testing.F) {
	s := recordSession(f, false, false)
	f.Add(s.clientSent, s.driverSent, uint8(7))
	f.Add(s.clientSent[:len(s.clientSent)/2], s.driverSent, uint8(1))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, client, driver []byte, split uint8) {
		rec := &abandonCounter{}
		var obs []sidecar.Observation
		tap := sidecar.NewTap(sidecar.ObserverFunc(func(o sidecar.Observation) { obs = append(obs, o) }), rec, 64)
		tc := tap.NewConn()
		feedSplit(tc.FromClient(), client, int(split)+1)
		feedSplit(tc.FromDriver(), driver, int(split)+1)
		tc.Close()
		tap.Close()
		for _, r := range rec.reasons {
			if r == sidecar.AbandonPanic {
				t.Fatal("tap parser panicked")
			}
		}
		for _, o := range obs {
			for k, v := range o.Request.Parameters {
				if strings.Contains(k+v, "s3cr3t") {
					t.Fatal("secret leaked into an observation")
				}
			}
		}
	})
}

// feedSplit feeds b in pieces of n bytes, as reads of a socket would.
func feedSplit(sink interface{ Feed([]byte, time.Time) }, b []byte, n int) {
	for len(b) > 0 {
		k := min(n*97, len(b))
		sink.Feed(b[:k], time.Now())
		b = b[k:]
	}
}
