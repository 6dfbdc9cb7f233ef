package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/test/cluster"
)

// quietWindow is how long the sidecar must have written nothing (its Lease
// renewals aside) for the stack to count as settled; with --resync-period=1s
// that is about ten passes.
const quietWindow = 10 * time.Second

var quietFlavor = strings.Repeat("9e", 32)

// TestNoAPIWritesWhenNothingChanged reads kube-apiserver's audit log of the
// sidecar's ServiceAccount: once a golden, a worker disk and the admission
// parameters are settled, pass after pass (each reading the parameters back
// to compare) writes nothing; a StorageClass change that changes a
// prediction rewrites the parameters exactly once and nothing else.
func TestNoAPIWritesWhenNothingChanged(t *testing.T) {
	checkNoLeaks(t)
	c := cluster.Start(t, cluster.Options{
		StorageClasses: []cluster.StorageClass{
			{Name: "replicated", DefaultVirt: true},
			{Name: "replicated-fixed", Pool: "fixed", NoExpansion: true},
		},
		SidecarArgs: []string{"--resync-period=1s", "--admission-params=true"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	golden := admissionGolden(t, ctx, c, quietFlavor)
	w := cluster.Worker{Namespace: admissionTenant, Name: "quiet", Golden: golden, Pool: "kubernetes-quiet", StorageClass: "replicated", Size: "20Gi"}
	if _, err := c.CreateWorkerDisk(ctx, w); err != nil {
		t.Fatal(err)
	}
	waitVerdict(t, ctx, c, admissionTenant, w.Name, record.VerdictCSIClone, 3*time.Minute)
	key := golden + ".path.replicated-fixed"
	waitAdmissionParams(t, ctx, c, key, "host-assisted/no-volume-expansion")

	settled := waitQuiet(t, ctx, c, 0)
	if n := countParamsReads(settled); n < 5 {
		t.Errorf("%d reads of the parameters in %s of quiet: the passes did not run", n, quietWindow)
	}

	mark := len(sidecarRequests(t, c))
	patch := []byte(`{"allowVolumeExpansion":true}`)
	if _, err := c.Client.StorageV1().StorageClasses().Patch(ctx, "replicated-fixed", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitAdmissionParams(t, ctx, c, key, "csi-clone/cdi-override")
	waitQuiet(t, ctx, c, mark)
	var writes []string
	for _, r := range sidecarRequests(t, c)[mark:] {
		if isWrite(r) {
			writes = append(writes, fmt.Sprintf("%s %s %s/%s", r.Verb, r.Resource, r.Namespace, r.Name))
		}
	}
	want := []string{"update configmaps " + cluster.NamespaceCSI + "/" + publish.AdmissionParamsName}
	if !slices.Equal(writes, want) {
		t.Errorf("after one StorageClass change the sidecar wrote %q, want %q", writes, want)
	}
}

// isWrite: a request that changes an object, Lease renewals (leader
// election, every few seconds by design) aside.
func isWrite(r cluster.Request) bool {
	return r.Resource != "leases" && slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, r.Verb)
}

func countParamsReads(reqs []cluster.Request) int {
	n := 0
	for _, r := range reqs {
		if r.Verb == "get" && r.Resource == "configmaps" && r.Name == publish.AdmissionParamsName {
			n++
		}
	}
	return n
}

func sidecarRequests(t *testing.T, c *cluster.Cluster) []cluster.Request {
	t.Helper()
	reqs, err := c.SidecarRequests()
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// waitQuiet waits until the sidecar's last write (among its requests from
// index from on) is quietWindow old, and returns the requests of that
// window. A sidecar that keeps writing never gets there.
func waitQuiet(t *testing.T, ctx context.Context, c *cluster.Cluster, from int) []cluster.Request {
	t.Helper()
	var window []cluster.Request
	var last cluster.Request
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		reqs := sidecarRequests(t, c)[from:]
		start := time.Now().Add(-quietWindow)
		window = window[:0]
		quiet := true
		for _, r := range reqs {
			if isWrite(r) && r.Time.After(start) {
				quiet, last = false, r
			}
			if r.Time.After(start) {
				window = append(window, r)
			}
		}
		return quiet && len(reqs) > 0 && reqs[0].Time.Before(start), nil
	})
	if err != nil {
		t.Fatalf("the sidecar never stayed %s without writing; last write: %s %s %s/%s at %s", quietWindow,
			last.Verb, last.Resource, last.Namespace, last.Name, last.Time.Format(time.RFC3339Nano))
	}
	return window
}
