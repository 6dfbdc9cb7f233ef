package config

import (
	"slices"
	"strings"
	"testing"
)

// TestGoldenNamespacesAcceptOneOrSeveral: --golden-namespace takes one
// namespace, as before, or several comma-separated; anything else is refused
// with a one-line reason naming the flag.
func TestGoldenNamespacesAcceptOneOrSeveral(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  Namespaces // nil: refused
	}{
		{"cozy-public", Namespaces{"cozy-public"}},
		{"cozy-public,golden-images", Namespaces{"cozy-public", "golden-images"}},
		{"cozy-public, golden-images", Namespaces{"cozy-public", "golden-images"}},
		{"", nil},
		{"cozy-public,", nil},
		{",cozy-public", nil},
		{"cozy-public,cozy-public", nil},
		{"Cozy_Public", nil},
		{"cozy-public,bad/name", nil},
	} {
		c := DefaultConfig()
		c.LedgerNamespace = "cozy-linstor"
		c.GoldenNamespace = tc.value
		err := c.Validate()
		if reportErr := c.ValidateReport(); (reportErr == nil) != (err == nil) {
			t.Errorf("%q: Validate %v but ValidateReport %v", tc.value, err, reportErr)
		}
		switch {
		case tc.want == nil && (err == nil || !strings.Contains(err.Error(), "--golden-namespace") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%q: got %v, want a one-line error naming --golden-namespace", tc.value, err)
		case tc.want != nil && err != nil:
			t.Errorf("%q: refused: %v", tc.value, err)
		case tc.want != nil && !slices.Equal(c.GoldenNamespaces(), tc.want):
			t.Errorf("%q: namespaces %v, want %v", tc.value, c.GoldenNamespaces(), tc.want)
		}
	}
	if p := (Namespaces{"a", "b"}).Primary(); p != "a" {
		t.Errorf("primary %q, want the first", p)
	}
}
