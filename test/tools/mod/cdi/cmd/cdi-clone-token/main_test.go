package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	"kubevirt.io/containerized-data-importer/pkg/common"
	cc "kubevirt.io/containerized-data-importer/pkg/controller/common"
	"kubevirt.io/containerized-data-importer/pkg/token"
)

// TestControllerAcceptsToken has CDI's own controller check judge the token,
// for a source PVC and a source VolumeSnapshot; one minted for the other
// resource is refused.
func TestControllerAcceptsToken(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	validator := token.NewValidator(common.CloneTokenIssuer, &key.PublicKey, 0)
	dv := func(tok, resource, ns, name string) *cdiv1.DataVolume {
		src := &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "cozy-public", Name: "golden"}}
		if resource == resourceSnapshot {
			src = &cdiv1.DataVolumeSource{Snapshot: &cdiv1.DataVolumeSourceSnapshot{Namespace: "cozy-public", Name: "golden"}}
		}
		return &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Annotations: map[string]string{cc.AnnCloneToken: tok}},
			Spec: cdiv1.DataVolumeSpec{Source: src},
		}
	}
	for _, resource := range []string{resourcePVC, resourceSnapshot} {
		tok, err := mint(pemKey, resource, "cozy-public", "golden", "tenant-a", "worker-disk")
		if err != nil {
			t.Fatal(err)
		}
		if err := cc.ValidateCloneTokenDV(validator, dv(tok, resource, "tenant-a", "worker-disk")); err != nil {
			t.Fatalf("%s: CDI refused the token: %v", resource, err)
		}
		if err := cc.ValidateCloneTokenDV(validator, dv(tok, resource, "tenant-a", "other-disk")); err == nil {
			t.Fatalf("%s: CDI accepted the token for a DataVolume it was not minted for", resource)
		}
		other := map[string]string{resourcePVC: resourceSnapshot, resourceSnapshot: resourcePVC}[resource]
		if err := cc.ValidateCloneTokenDV(validator, dv(tok, other, "tenant-a", "worker-disk")); err == nil {
			t.Fatalf("%s: CDI accepted the token for a source.%s", resource, other)
		}
	}
}

func TestRejectsNonKey(t *testing.T) {
	if _, err := mint([]byte("not pem"), resourcePVC, "a", "b", "c", "d"); err == nil {
		t.Fatal("minted a token from a file that is not a key")
	}
}
