// Package config holds the cloner's settings: the values of its flags, their
// defaults and validation, and the API clients it is given.
package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Config holds the values of the sidecar's cloner flags.
type Config struct {
	// GoldenNamespace is --golden-namespace as given: one namespace or
	// several, comma-separated, that hold the goldens (GoldenNamespaces).
	GoldenNamespace string
	// StuckAfter is how long a requested clone may stay unbound before it is
	// "stuck" (--stuck-after).
	StuckAfter time.Duration
	// ResyncPeriod is the spacing of full verdict passes, a safety net
	// (--resync-period): a change re-judges the disks it touches at once,
	// and a time-driven change (stuck, evidence grace) comes on its own
	// timer. The informers do not resync.
	ResyncPeriod time.Duration
	// LedgerNamespace and LedgerName locate the ledger ConfigMap
	// (--ledger-namespace, default $POD_NAMESPACE; --ledger-name).
	LedgerNamespace string
	LedgerName      string
	// FactoryImageBytes, when > 0, is the size of one Image Factory fetch
	// (--factory-image-bytes); otherwise a fetch is taken to be the golden
	// volume's capacity.
	FactoryImageBytes int64
	// EvidenceTTL bounds how long evidence waits for its PV or PVC to appear
	// (--evidence-ttl); EvidenceQueue bounds the observations waiting to be
	// processed (--evidence-queue).
	EvidenceTTL   time.Duration
	EvidenceQueue int
	// EvidenceGrace is how long a finished disk whose PV carries no tap
	// evidence waits for it before it is judged from CDI's annotations
	// (--evidence-grace): the replica that saw the CreateVolume writes the
	// evidence a moment after the PV appears, and a verdict that said "no
	// sidecar watched" in that moment would be wrong.
	EvidenceGrace time.Duration
	// AdmissionParams makes the leader keep the admission guard's
	// parameters (ConfigMap AdmissionParamsName in LedgerNamespace) current
	// (--admission-params).
	AdmissionParams bool
	// AdmissionAllowClassMismatch lets the guard admit a disk onto
	// another class than its golden's (--admission-allow-class-mismatch).
	AdmissionAllowClassMismatch bool
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
}

// maxLedgerName leaves room for the shard suffix "-NN" in a 253-character name.
const maxLedgerName = 250

// Defaults of the cloner flags.
const (
	DefaultGoldenNamespace = "cozy-public"
	DefaultStuckAfter      = 10 * time.Minute
	DefaultResyncPeriod    = 10 * time.Minute
	DefaultLedgerName      = "csi-clone-sidecar-ledger"
	DefaultEvidenceTTL     = 15 * time.Minute
	DefaultEvidenceQueue   = 4096
	DefaultEvidenceGrace   = 30 * time.Second
)

// DefaultConfig returns a Config with every default filled in; LedgerNamespace
// must still be set (the lead passes $POD_NAMESPACE).
func DefaultConfig() Config {
	return Config{
		GoldenNamespace: DefaultGoldenNamespace,
		StuckAfter:      DefaultStuckAfter,
		ResyncPeriod:    DefaultResyncPeriod,
		LedgerName:      DefaultLedgerName,
		EvidenceTTL:     DefaultEvidenceTTL,
		EvidenceQueue:   DefaultEvidenceQueue,
		EvidenceGrace:   DefaultEvidenceGrace,
	}
}

// Validate returns a one-line reason for the first bad value.
func (c Config) Validate() error {
	if err := validateGoldenNamespaces(c.GoldenNamespace); err != nil {
		return err
	}
	if c.LedgerNamespace == "" {
		return errors.New("--ledger-namespace is empty and POD_NAMESPACE is not set")
	}
	if msgs := validation.IsDNS1123Label(c.LedgerNamespace); len(msgs) > 0 {
		return fmt.Errorf("--ledger-namespace %q: %s", c.LedgerNamespace, msgs[0])
	}
	if msgs := validation.IsDNS1123Subdomain(c.LedgerName); len(msgs) > 0 {
		return fmt.Errorf("--ledger-name %q: %s", c.LedgerName, msgs[0])
	}
	if len(c.LedgerName) > maxLedgerName {
		return fmt.Errorf("--ledger-name %q: at most %d characters (its shards are named <name>-NN)", c.LedgerName, maxLedgerName)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--stuck-after", c.StuckAfter}, {"--resync-period", c.ResyncPeriod}, {"--evidence-ttl", c.EvidenceTTL}} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive, got %s", d.flag, d.v)
		}
	}
	if c.EvidenceGrace < 0 {
		return fmt.Errorf("--evidence-grace must not be negative, got %s", c.EvidenceGrace)
	}
	if c.FactoryImageBytes < 0 {
		return fmt.Errorf("--factory-image-bytes must not be negative, got %d", c.FactoryImageBytes)
	}
	if c.EvidenceQueue <= 0 {
		return fmt.Errorf("--evidence-queue must be positive, got %d", c.EvidenceQueue)
	}
	return nil
}

// ValidateReport checks only what `report` uses: it runs outside the pod,
// where an empty ledger namespace means "find the ledger by its label".
func (c Config) ValidateReport() error {
	if err := validateGoldenNamespaces(c.GoldenNamespace); err != nil {
		return err
	}
	if c.LedgerNamespace != "" {
		if msgs := validation.IsDNS1123Label(c.LedgerNamespace); len(msgs) > 0 {
			return fmt.Errorf("--ledger-namespace %q: %s", c.LedgerNamespace, msgs[0])
		}
	}
	if msgs := validation.IsDNS1123Subdomain(c.LedgerName); len(msgs) > 0 {
		return fmt.Errorf("--ledger-name %q: %s", c.LedgerName, msgs[0])
	}
	return nil
}

// Namespaces is a set of namespaces in the order given; the first is the
// one a bare golden name means (the golden annotation "<name>").
type Namespaces []string

// Has reports whether ns is one of them.
func (n Namespaces) Has(ns string) bool { return slices.Contains(n, ns) }

// Primary is the first namespace, "" when there is none.
func (n Namespaces) Primary() string {
	if len(n) == 0 {
		return ""
	}
	return n[0]
}

// GoldenNamespaces are the namespaces of --golden-namespace. Validate
// first: an invalid value yields what it can split.
func (c Config) GoldenNamespaces() Namespaces { return splitNamespaces(c.GoldenNamespace) }

func splitNamespaces(v string) Namespaces {
	var out Namespaces
	for _, ns := range strings.Split(v, ",") {
		out = append(out, strings.TrimSpace(ns))
	}
	return out
}

// validateGoldenNamespaces accepts one namespace or several, comma-separated,
// each a DNS label, none empty or repeated.
func validateGoldenNamespaces(v string) error {
	seen := map[string]bool{}
	for _, ns := range splitNamespaces(v) {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return fmt.Errorf("--golden-namespace %q: namespace %q: %s", v, ns, msgs[0])
		}
		if seen[ns] {
			return fmt.Errorf("--golden-namespace %q: namespace %q is given twice", v, ns)
		}
		seen[ns] = true
	}
	return nil
}

func (c Config) Clock() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Clients are the API clients the cloner uses: typed for core and storage
// objects, dynamic for DataVolumes and VolumeSnapshotContents.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

func (c Clients) Validate() error {
	if c.Kube == nil || c.Dynamic == nil {
		return errors.New("cloner needs both a typed and a dynamic Kubernetes client")
	}
	return nil
}
