package cloner

import (
	"flag"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/sidecar"
	"github.com/cozystack/csi-clone-sidecar/test/syncbuf"
)

// TestParametersNeverReachLogsOrObjects: CreateVolume parameters can carry
// anything a StorageClass holds; only the two claim parameters are ever read.
// Verbose logging included, nothing else may reach a log or an object.
func TestParametersNeverReachLogsOrObjects(t *testing.T) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", "10")
	_ = fs.Set("logtostderr", "false")
	var logs syncbuf.Buffer
	klog.SetOutput(&logs)
	defer func() { _ = fs.Set("v", "0"); klog.SetOutput(nil); _ = fs.Set("logtostderr", "true") }()

	var w clonertest.World
	w.Class(clonertest.TestClass, nil, clonertest.T0)
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "d", "p", g, 20*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	target, _ := w.Claim(dv, clonertest.TestClass, 20*clonertest.Gi, 0, "")
	fc := newFakeCluster(t, &w)
	cfg := clonertest.ConfigAt(clonertest.T0.Add(time.Hour))
	ctx := t.Context()
	c := fc.controller(t, ctx, cfg)
	go func() { _ = c.RunEvidence(ctx) }()
	secret := map[string]string{fleet.ParamPVCName: "tmp-pvc-" + string(target.UID), fleet.ParamPVCNamespace: "cozy-public",
		"csi.storage.k8s.io/provisioner-secret-name": "s3cr3t-name", "password": "hunter2"}
	c.Observe(sidecar.Observation{Method: sidecar.MethodCreateVolume, Start: clonertest.T0, End: clonertest.T0, Code: codes.Unavailable,
		Message: "pool unreachable", Request: sidecar.Request{Name: "pvc-z", Parameters: secret}})
	eventually(t, "driver error persisted", func() bool {
		pvc, _ := fc.kube.CoreV1().PersistentVolumeClaims("tenant-a").Get(ctx, "d", metav1.GetOptions{})
		return pvc.Annotations[fleet.AnnDriverError] != ""
	})
	fc.settle(t, c)
	if err := c.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	klog.Flush()
	if logs.String() == "" {
		t.Fatal("klog captured nothing: the check would prove nothing")
	}
	for _, s := range []string{"hunter2", "s3cr3t-name"} {
		if strings.Contains(logs.String(), s) || strings.Contains(fc.everything(t), s) {
			t.Fatalf("parameter value %q reached a log or an object", s)
		}
	}
}
