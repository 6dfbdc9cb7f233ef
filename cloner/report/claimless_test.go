package report_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"

	"github.com/cozystack/csi-clone-sidecar/cloner/clonertest"
	"github.com/cozystack/csi-clone-sidecar/cloner/config"
	"github.com/cozystack/csi-clone-sidecar/cloner/fleet"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/record"
	"github.com/cozystack/csi-clone-sidecar/cloner/report"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

// TestReportJudgesADiskWithNoClaim: a disk CDI refused has no claim to carry
// the verdict; the report shows the verdict the leader gives it.
func TestReportJudgesADiskWithNoClaim(t *testing.T) {
	var w clonertest.World
	g, _ := w.Golden(clonertest.TestSID, clonertest.TestVer)
	dv := w.Worker("tenant-a", "small", "p", g, 4*clonertest.Gi, publish.PtrTo(clonertest.TestClass))
	dv.Spec.Storage.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	clonertest.Condition(dv, cdiv1.DataVolumeBound, corev1.ConditionFalse, fleet.CdiReasonValidationFailed, "The clone doesn't meet the validation requirements", clonertest.T0)
	inv := fleet.BuildInventory(w.Objects(t), config.Namespaces{config.DefaultGoldenNamespace})
	_, bad := report.ReportDisks(inv, report.JudgeClaimless(inv, clonertest.ConfigAt(clonertest.T0.Add(time.Minute)), verdict.BuildPredictor(clonertest.CdiAtDefaults(), inv)))
	if len(bad) != 1 || bad[0].Verdict != record.VerdictFailed || len(bad[0].Reasons) != 2 ||
		!strings.Contains(bad[0].Reasons[0].Message, "CloneValidationFailed") {
		t.Fatalf("bad disks %+v", bad)
	}
}
