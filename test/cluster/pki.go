package cluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the files the control plane is started with, all generated fresh
// in the state directory: nothing is shared between runs.
type pki struct {
	caCert, servingCert, servingKey string // serving chain of kube-apiserver
	saKey, saPub                    string // service-account token signing pair
	tokenFile                       string // --token-auth-file
	adminToken                      string
	caPEM                           []byte
}

// makePKI writes a throwaway CA, a serving certificate for 127.0.0.1, the
// service-account key pair and a static token file with one admin token.
func makePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
	}
	ca, err := writeCA(p.caCert, filepath.Join(dir, "ca.key"), "csi-clone-sidecar-e2e-ca")
	if err != nil {
		return nil, err
	}
	p.caPEM = ca.pem
	now := time.Now()

	srvKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca.cert, &srvKey.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("create serving cert: %w", err)
	}
	if err := writePEM(p.servingCert, "CERTIFICATE", srvDER); err != nil {
		return nil, err
	}
	if err := writeRSAKey(p.servingKey, "", srvKey, false); err != nil {
		return nil, err
	}
	if err := writeNewRSAPair(p.saKey, p.saPub); err != nil {
		return nil, err
	}

	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	p.adminToken = hex.EncodeToString(tok)
	line := fmt.Sprintf("%s,admin,admin,system:masters\n", p.adminToken)
	if err := os.WriteFile(p.tokenFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// ca is a throwaway certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *rsa.PrivateKey
	pem  []byte
}

// writeCA creates a self-signed CA valid for a day and writes its PEM
// certificate and PKCS#1 key.
func writeCA(certPath, keyPath, cn string) (*ca, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	if err := os.WriteFile(certPath, c.pem, 0o644); err != nil {
		return nil, err
	}
	if err := writeRSAKey(keyPath, "", key, false); err != nil {
		return nil, err
	}
	return c, nil
}

// writeNewRSAPair writes a fresh RSA private key (PKCS#1 PEM) and its public
// key (PKIX PEM): the format both kube-apiserver and CDI's token code read.
func writeNewRSAPair(keyPath, pubPath string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return writeRSAKey(keyPath, pubPath, k, true)
}

func writeRSAKey(keyPath, pubPath string, k *rsa.PrivateKey, withPub bool) error {
	if err := writePEMMode(keyPath, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(k), 0o600); err != nil {
		return err
	}
	if !withPub {
		return nil
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub)
}

func writePEM(path, typ string, der []byte) error { return writePEMMode(path, typ, der, 0o644) }

func writePEMMode(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
