package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cozystack/csi-clone-sidecar/cloner/predict"
	"github.com/cozystack/csi-clone-sidecar/cloner/publish"
	"github.com/cozystack/csi-clone-sidecar/cloner/verdict"
)

func TestPredictionCollectorSeries(t *testing.T) {
	s := leaderSnapshot()
	s.Paths = []verdict.ClonePathReport{
		{SchematicID: sid, Version: "v1.13.2", StorageClass: "replicated-fixed", Prediction: predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion}},
		{SchematicID: sid, Version: "v1.13.2", StorageClass: predict.EmptyClass, Prediction: predict.Prediction{Path: predict.PathCSIClone, Reason: predict.ReasonCDIOverride,
			AccessModes: []string{"ReadWriteMany"}}},
		{SchematicID: sid, Version: "v1.13.2", StorageClass: "replicated-rwo", Prediction: predict.Prediction{Path: predict.PathCSIClone, Reason: predict.ReasonCDIOverride,
			AccessModes: []string{"ReadWriteOnce"}}},
	}
	s.PredictionChecks = verdict.PredictionCheck{Right: 3, Wrong: 1}
	s.AdmissionParams = publish.AdmissionParamsSynced
	c := NewPredictionCollector(snapshotSource{s})
	want := `
# HELP csi_clone_path_predicted The clone path CDI is predicted to take for a worker disk larger than the golden, one series per (golden flavor, StorageClass) pair with value 1: path csi-clone, snapshot-clone, host-assisted or blocked, and its reason. storage_class="(default)" is a disk that names no class, resolved to the default.
# TYPE csi_clone_path_predicted gauge
csi_clone_path_predicted{path="csi-clone",reason="cdi-override",schematic_id="` + sid + `",storage_class="(default)",version="v1.13.2"} 1
csi_clone_path_predicted{path="host-assisted",reason="no-volume-expansion",schematic_id="` + sid + `",storage_class="replicated-fixed",version="v1.13.2"} 1
csi_clone_path_predicted{path="csi-clone",reason="cdi-override",schematic_id="` + sid + `",storage_class="replicated-rwo",version="v1.13.2"} 1
# HELP csi_clone_read_write_many_predicted Whether CDI is predicted to give a worker disk of the flavor on the StorageClass a ReadWriteMany claim (1) or not (0: the worker's VM could not live-migrate), one series per csi_clone_path_predicted pair; the platform's worker template names no access modes, so the class's StorageProfile decides. No series where CDI renders no claim.
# TYPE csi_clone_read_write_many_predicted gauge
csi_clone_read_write_many_predicted{schematic_id="` + sid + `",storage_class="(default)",version="v1.13.2"} 1
csi_clone_read_write_many_predicted{schematic_id="` + sid + `",storage_class="replicated-rwo",version="v1.13.2"} 0
# HELP csi_clone_prediction_checks Worker disks with a decided verdict and a recorded prediction, by result: right (the verdict shows the predicted path) or wrong (finding prediction-wrong).
# TYPE csi_clone_prediction_checks gauge
csi_clone_prediction_checks{result="right"} 3
csi_clone_prediction_checks{result="wrong"} 1
# HELP csi_clone_admission_params_synced 1 when the admission guard's parameters (ConfigMap csi-clone-sidecar-admission) hold the current predictions, 0 when the leader failed to write them; only with --admission-params.
# TYPE csi_clone_admission_params_synced gauge
csi_clone_admission_params_synced 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "csi_clone_path_predicted", "csi_clone_read_write_many_predicted",
		"csi_clone_prediction_checks", "csi_clone_admission_params_synced"); err != nil {
		t.Fatal(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
	s.Leader = false
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("a replica that does not lead exports %d prediction series", n)
	}
}

// Several goldens of one flavor (one misnamed) would repeat a series: the
// first of each (flavor, class) pair is exported, and the pairs after a
// repeated one still are.
func TestPredictedPathsAreOneSeriesPerFlavorAndClass(t *testing.T) {
	s := leaderSnapshot()
	s.Paths = []verdict.ClonePathReport{
		{Golden: "a", SchematicID: sid, Version: "v1.13.2", StorageClass: "replicated", Prediction: predict.Prediction{Path: predict.PathCSIClone, Reason: predict.ReasonCDIOverride}},
		{Golden: "b", SchematicID: sid, Version: "v1.13.2", StorageClass: "replicated", Prediction: predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion}},
		{Golden: "a", SchematicID: sid, Version: "v1.13.2", StorageClass: "replicated-fixed", Prediction: predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion}},
	}
	want := `
# HELP csi_clone_path_predicted The clone path CDI is predicted to take for a worker disk larger than the golden, one series per (golden flavor, StorageClass) pair with value 1: path csi-clone, snapshot-clone, host-assisted or blocked, and its reason. storage_class="(default)" is a disk that names no class, resolved to the default.
# TYPE csi_clone_path_predicted gauge
csi_clone_path_predicted{path="csi-clone",reason="cdi-override",schematic_id="` + sid + `",storage_class="replicated",version="v1.13.2"} 1
csi_clone_path_predicted{path="host-assisted",reason="no-volume-expansion",schematic_id="` + sid + `",storage_class="replicated-fixed",version="v1.13.2"} 1
`
	if err := testutil.CollectAndCompare(NewPredictionCollector(snapshotSource{s}), strings.NewReader(want), "csi_clone_path_predicted"); err != nil {
		t.Fatal(err)
	}
}

// An image golden's (golden, class) pairs are their own series, labelled
// by the golden and its image, never by a flavor.
func TestImagePathPredictedSeries(t *testing.T) {
	s := leaderSnapshot()
	s.ImagePaths = []verdict.ClonePathReport{
		{Golden: "cozy-public/vm-default-images-ubuntu", Image: "ubuntu", StorageClass: "replicated", Prediction: predict.Prediction{Path: predict.PathCSIClone, Reason: predict.ReasonStorageProfile}},
		{Golden: "cozy-public/vm-default-images-ubuntu", Image: "ubuntu", StorageClass: "replicated-fixed", Prediction: predict.Prediction{Path: predict.PathHostAssisted, Reason: predict.ReasonNoVolumeExpansion}},
	}
	c := NewPredictionCollector(snapshotSource{s})
	want := `
# HELP csi_clone_image_path_predicted The clone path CDI is predicted to take for a disk cloned from an image golden (vm-default-images) larger than it, one series per (golden, StorageClass) pair with value 1, as csi_clone_path_predicted for the Talos flavors.
# TYPE csi_clone_image_path_predicted gauge
csi_clone_image_path_predicted{golden="vm-default-images-ubuntu",image="ubuntu",namespace="cozy-public",path="csi-clone",reason="storage-profile",storage_class="replicated"} 1
csi_clone_image_path_predicted{golden="vm-default-images-ubuntu",image="ubuntu",namespace="cozy-public",path="host-assisted",reason="no-volume-expansion",storage_class="replicated-fixed"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "csi_clone_image_path_predicted"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "csi_clone_path_predicted"); n != 0 {
		t.Errorf("an image golden's pairs made %d flavor series", n)
	}
}
