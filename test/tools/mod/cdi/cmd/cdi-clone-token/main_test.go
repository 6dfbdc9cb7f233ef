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

// TestControllerAcceptsToken has CDI's own controller check judge the token.
func TestControllerAcceptsToken(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	tok, err := mint(pemKey, "cozy-public", "golden", "tenant-a", "worker-disk")
	if err != nil {
		t.Fatal(err)
	}
	validator := token.NewValidator(common.CloneTokenIssuer, &key.PublicKey, 0)
	dv := func(ns, name string) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
				Annotations: map[string]string{cc.AnnCloneToken: tok}},
			Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{
				PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "cozy-public", Name: "golden"}}},
		}
	}
	if err := cc.ValidateCloneTokenDV(validator, dv("tenant-a", "worker-disk")); err != nil {
		t.Fatalf("CDI refused the token: %v", err)
	}
	if err := cc.ValidateCloneTokenDV(validator, dv("tenant-a", "other-disk")); err == nil {
		t.Fatal("CDI accepted the token for a DataVolume it was not minted for")
	}
}

func TestRejectsNonKey(t *testing.T) {
	if _, err := mint([]byte("not pem"), "a", "b", "c", "d"); err == nil {
		t.Fatal("minted a token from a file that is not a key")
	}
}
