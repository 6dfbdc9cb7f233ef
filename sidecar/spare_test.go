package sidecar

import (
	"bytes"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
)

// A connection's finished call records are reused for its next calls,
// emptied: what one call left (its method, name, status, deadline, reply
// framing) never shows in the next, and a long connection's calls allocate
// no record each.
func TestSpareCallRecordsCarryNothingOver(t *testing.T) {
	w, u := newWire(t), newTapUnderTest()
	var want []codes.Code
	id := uint32(1)
	for i := range 40 {
		name := "pvc-" + string(rune('a'+i%26))
		w.request(id, MethodCreateVolume, &csi.CreateVolumeRequest{Name: name})
		code := codes.Code(i % 3 * 5) // OK, NotFound, Aborted
		var reply *csi.CreateVolumeResponse
		if code == codes.OK {
			reply = &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: "vol-" + name}}
		}
		w.reply(id, reply, code)
		want = append(want, code)
		id += 2
		w.request(id, "/csi.v1.Controller/ControllerGetCapabilities", &csi.ControllerGetCapabilitiesRequest{})
		w.reply(id, &csi.ControllerGetCapabilitiesResponse{}, codes.OK)
		want = append(want, codes.OK)
		id += 2
		u.feed(w)
	}
	u.tc.mu.Lock()
	spare := len(u.tc.spare)
	u.tc.mu.Unlock()
	obs := u.close()
	if spare == 0 || spare > maxSpareCalls {
		t.Errorf("%d spare records, want 1 to %d", spare, maxSpareCalls)
	}
	if !slices.Equal(u.rec.finished, want) {
		t.Fatalf("finished %v, want %v", u.rec.finished, want)
	}
	for i, o := range obs {
		if o.Method != MethodCreateVolume {
			continue
		}
		wantName := "pvc-" + string(rune('a'+i/2%26))
		wantVol := ""
		if o.Code == codes.OK {
			wantVol = "vol-" + wantName
		}
		if o.Request.Name != wantName || o.Response.VolumeID != wantVol || o.Message != "" {
			t.Errorf("observation %d: %+v, want name %q, volume %q", i, o, wantName, wantVol)
		}
	}

	// Steady state: no record allocated per call.
	tap := NewTap(nil, nil, 64)
	tc := tap.NewConn()
	w = newWire(t)
	call := func(id uint32) {
		w.headers(true, id, false, ":method", "POST", ":path", "/csi.v1.Controller/ControllerGetCapabilities",
			"content-type", "application/grpc", "grpc-timeout", "1S")
		w.check(w.cfr.WriteData(id, true, []byte{0, 0, 0, 0, 0}))
		w.reply(id, &csi.ControllerGetCapabilitiesResponse{}, codes.OK)
	}
	type chunks struct{ client, driver []byte }
	var sent []chunks
	const warm, calls = 100, 1000
	for id := uint32(1); id < 2*(warm+calls); id += 2 {
		call(id)
		sent = append(sent, chunks{bytes.Clone(w.client.Bytes()), bytes.Clone(w.driver.Bytes())})
		w.client.Reset()
		w.driver.Reset()
	}
	at := time.Now()
	feed := func(c chunks) {
		tc.FromClient().Feed(c.client, at)
		tc.FromDriver().Feed(c.driver, at)
	}
	for _, c := range sent[:warm] { // the first calls make the records and the tables
		feed(c)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, c := range sent[warm:] {
		feed(c)
	}
	runtime.ReadMemStats(&after)
	perCall := float64(after.Mallocs-before.Mallocs) / calls
	tc.Close()
	tap.Close()
	if perCall >= 0.1 {
		t.Errorf("%.2f allocations per call, want none but the first calls'", perCall)
	}
}
