// Package cdirules is the project's one statement of CDI v1.65.0's rules for
// a DataVolume that clones a PVC: how CDI renders the DataVolume's claim
// (class, volume mode, size), how it sizes a clone without a size, how it
// validates the clone, which clone strategy it picks and when it falls back
// to a host-assisted copy. Prediction, the admission guard's parameters and
// the catalog's pairs ask this package; nothing else re-derives a CDI rule.
//
// Pure functions of values the caller read from the API: no client, no
// informer. Each function names the CDI v1.65.0 file and function it follows
// (paths under kubevirt/containerized-data-importer, tag v1.65.0). The
// differential test in test/e2e holds these rules against the real
// cdi-controller over generated arrangements.
package cdirules
