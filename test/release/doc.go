// Package release proves a release end to end on loopback: `make release`
// twice (the same bytes), `make publish` into an OCI registry served in the
// test on 127.0.0.1, the chart pulled from there rendering the pushed
// digest, and the image pulled from there by podman relaying CSI calls.
// Run it with `go test ./test/release` (root: podman runs rootful).
package release
