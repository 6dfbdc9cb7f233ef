// Command cdi-clone-token prints a CDI cross-namespace clone token, the one
// the cdi-apiserver webhook would put on a DataVolume as
// cdi.kubevirt.io/storage.clone.token. The test stack runs no webhook, so the
// harness mints a token with the key pair the CDI controller validates with,
// right before creating each cross-namespace DataVolume (tokens expire).
//
//	cdi-clone-token -key id_rsa -source-namespace NS -source-name PVC \
//	    -target-namespace NS -target-name DV [-source-resource volumesnapshots]
package main

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kubevirt.io/containerized-data-importer/pkg/common"
	"kubevirt.io/containerized-data-importer/pkg/token"
)

// lifetime matches what the cdi-apiserver webhook gives its clone tokens.
const lifetime = 5 * time.Minute

func main() {
	keyPath := flag.String("key", "", "PEM RSA private key the CDI controller trusts (id_rsa)")
	srcNS := flag.String("source-namespace", "", "namespace of the source PVC or VolumeSnapshot")
	srcName := flag.String("source-name", "", "name of the source PVC or VolumeSnapshot")
	srcResource := flag.String("source-resource", resourcePVC, "the source's resource: "+resourcePVC+" (source.pvc) or "+resourceSnapshot+" (source.snapshot)")
	dstNS := flag.String("target-namespace", "", "namespace of the target DataVolume")
	dstName := flag.String("target-name", "", "name of the target DataVolume")
	flag.Parse()
	for _, name := range []string{"key", "source-namespace", "source-name", "target-namespace", "target-name"} {
		if flag.Lookup(name).Value.String() == "" {
			fmt.Fprintf(os.Stderr, "cdi-clone-token: -%s is required\n", name)
			os.Exit(2)
		}
	}
	pemKey, err := os.ReadFile(*keyPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cdi-clone-token:", err)
		os.Exit(1)
	}
	if *srcResource != resourcePVC && *srcResource != resourceSnapshot {
		fmt.Fprintf(os.Stderr, "cdi-clone-token: -source-resource %q: want %s or %s\n", *srcResource, resourcePVC, resourceSnapshot)
		os.Exit(2)
	}
	tok, err := mint(pemKey, *srcResource, *srcNS, *srcName, *dstNS, *dstName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdi-clone-token: %s: %v\n", *keyPath, err)
		os.Exit(1)
	}
	fmt.Println(tok)
}

// The source resources CDI's token names (pkg/controller/common/util.go
// getTokenResourceNameDataVolume).
const (
	resourcePVC      = "persistentvolumeclaims"
	resourceSnapshot = "volumesnapshots"
)

// mint signs the payload the cdi-apiserver webhook signs for a DataVolume
// with source.pvc or source.snapshot: the controller checks every one of
// these fields.
func mint(pemKey []byte, resource, srcNS, srcName, dstNS, dstName string) (string, error) {
	key, err := parseKey(pemKey)
	if err != nil {
		return "", err
	}
	return token.NewGenerator(common.CloneTokenIssuer, key, lifetime).Generate(&token.Payload{
		Operation: token.OperationClone,
		Namespace: srcNS,
		Name:      srcName,
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: resource},
		Params:    map[string]string{"targetNamespace": dstNS, "targetName": dstName},
	})
}

// parseKey accepts PKCS#1 ("RSA PRIVATE KEY") and PKCS#8 ("PRIVATE KEY") PEM.
func parseKey(data []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("not an RSA private key: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA private key")
	}
	return rk, nil
}
