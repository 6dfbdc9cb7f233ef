package sidecar_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"

	"github.com/cozystack/csi-clone-sidecar/sidecar"
)

// Every RST_STREAM code, the 14 HTTP/2 defines and ones it does not, is
// reported as grpc-go's client reports it when the driver resets a stream
// before its status; REFUSED_STREAM is no call at all (grpc-go retries it
// transparently, the oracle is not asked). Dropping any one entry of the
// tap's table makes its code Unknown, which grpc-go says of none of them.
func TestResetCodesAsGRPCGoReportsThem(t *testing.T) {
	o, err := oracle()
	if err != nil {
		t.Fatal(err)
	}
	all := []http2.ErrCode{0xe, 0xff, 0xdeadbeef}
	for ec := http2.ErrCodeNo; ec <= http2.ErrCodeHTTP11Required; ec++ {
		all = append(all, ec)
	}
	for _, ec := range all {
		finished := tapOneReset(t, ec)
		if ec == http2.ErrCodeRefusedStream {
			if len(finished) != 0 {
				t.Errorf("REFUSED_STREAM: recorded %v, want no call", finished)
			}
			continue
		}
		want, msg, err := o.ask(diffHalf{reset: true, code: ec}, oracleWait)
		if err != nil {
			t.Fatal(err)
		}
		if len(finished) != 1 || finished[0] != want {
			t.Errorf("%v: tap recorded %v, grpc-go's client reports %v (%q)", ec, finished, want, msg)
		}
	}
}

// tapOneReset feeds a tap one CreateVolume call the driver resets with ec
// and returns the codes it recorded.
func tapOneReset(t *testing.T, ec http2.ErrCode) []codes.Code {
	var client, driver, block bytes.Buffer
	client.WriteString(http2.ClientPreface)
	cfr, dfr, enc := http2.NewFramer(&client, nil), http2.NewFramer(&driver, nil), hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: sidecar.MethodCreateVolume},
		{Name: "content-type", Value: "application/grpc"}} {
		enc.WriteField(f)
	}
	if err := cfr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := cfr.WriteData(1, true, []byte{0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := dfr.WriteRSTStream(1, ec); err != nil {
		t.Fatal(err)
	}
	rec := &codeRecorder{}
	tap := sidecar.NewTap(nil, rec, 16)
	tc := tap.NewConn()
	tc.FromClient().Feed(client.Bytes(), time.Now())
	tc.FromDriver().Feed(driver.Bytes(), time.Now())
	tc.Close()
	tap.Close()
	return rec.finished
}

// codeRecorder keeps the codes of the finished calls and their durations.
type codeRecorder struct {
	mu        sync.Mutex
	finished  []codes.Code
	durations []time.Duration
}

func (r *codeRecorder) CallFinished(_ string, c codes.Code, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished = append(r.finished, c)
	r.durations = append(r.durations, d)
}
func (r *codeRecorder) ConnectionTapped()          {}
func (r *codeRecorder) ConnectionAbandoned(string) {}
func (r *codeRecorder) ObservationDropped()        {}
func (r *codeRecorder) CallUndecoded(string)       {}
