package sidecar

import (
	"bytes"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/protobuf/proto"
)

// Decoding zeroes a request's secrets in its buffer, and keeps only the
// claim's parameters; a pooled buffer never carries a secret to its next use.
func TestDecodeWipesSecretsInPlace(t *testing.T) {
	for method, req := range map[string]proto.Message{
		MethodCreateVolume: &csi.CreateVolumeRequest{Name: "pvc-1", Secrets: map[string]string{"k": "s3cr3t-a"},
			Parameters: map[string]string{ClaimParameterPrefix + "name": "tmp-pvc-1", "other": "x"}},
		MethodControllerExpandVolume: &csi.ControllerExpandVolumeRequest{VolumeId: "v", Secrets: map[string]string{"s3cr3t-a": "v"}},
		MethodDeleteVolume:           &csi.DeleteVolumeRequest{VolumeId: "v", Secrets: map[string]string{"k": "s3cr3t-a"}},
		MethodCreateSnapshot:         &csi.CreateSnapshotRequest{Name: "s", Secrets: map[string]string{"k": "s3cr3t-a"}},
		MethodDeleteSnapshot:         &csi.DeleteSnapshotRequest{SnapshotId: "s", Secrets: map[string]string{"k": "s3cr3t-a"}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		o := Observation{Method: method}
		wiped, err := decodeCall(&o, b, nil)
		if err != nil || !wiped {
			t.Fatalf("%s: wiped %v, err %v", method, wiped, err)
		}
		if bytes.Contains(b, []byte("s3cr3t")) {
			t.Errorf("%s: the secret is still in the request buffer", method)
		}
		if o.Request.Name == "" && o.Request.VolumeID == "" && o.Request.SnapshotID == "" {
			t.Errorf("%s: nothing decoded: %+v", method, o.Request)
		}
	}
}

func TestClaimParametersOnly(t *testing.T) {
	b, _ := proto.Marshal(&csi.CreateVolumeRequest{Parameters: map[string]string{
		ClaimParameterPrefix + "name": "tmp-pvc-1", ClaimParameterPrefix + "namespace": "cozy-public",
		"csi.storage.k8s.io/pv/name": "pvc-1", "resourceGroup": "r"}})
	o := Observation{Method: MethodCreateVolume}
	if _, err := decodeCall(&o, b, nil); err != nil {
		t.Fatal(err)
	}
	if len(o.Request.Parameters) != 2 || o.Request.Parameters[ClaimParameterPrefix+"namespace"] != "cozy-public" {
		t.Fatalf("parameters %v, want only the two claim keys", o.Request.Parameters)
	}
}
