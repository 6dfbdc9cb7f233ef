package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// Factory is a loopback stand-in for the Talos Image Factory: it serves
// /image/<schematicID>/<version>/openstack-amd64.raw.xz with a small
// deterministic body per flavor, counts every fetch, and can be told to fail
// a flavor with an HTTP status.
type Factory struct {
	srv     *httptest.Server
	mu      sync.Mutex
	fetches map[string]int
	fail    map[string]int
}

func newFactory() *Factory {
	f := &Factory{fetches: map[string]int{}, fail: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL is the image URL of a flavor, as the platform builds it.
func (f *Factory) URL(schematicID, version string) string {
	return f.srv.URL + imagePath(schematicID, version)
}

func imagePath(schematicID, version string) string {
	return fmt.Sprintf("/image/%s/%s/openstack-amd64.raw.xz", schematicID, version)
}

// Fail makes every later fetch of the flavor answer status (e.g. 404).
func (f *Factory) Fail(schematicID, version string, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[imagePath(schematicID, version)] = status
}

// Fetches returns how many times the flavor's image was requested.
func (f *Factory) Fetches(schematicID, version string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fetches[imagePath(schematicID, version)]
}

// Image is the body served for a flavor.
func (f *Factory) Image(schematicID, version string) []byte {
	return imageBody(imagePath(schematicID, version))
}

// Checksum is "sha256:<hex>" of the body served for a flavor.
func (f *Factory) Checksum(schematicID, version string) string {
	sum := sha256.Sum256(imageBody(imagePath(schematicID, version)))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// imageBody is the bytes served for a path: small, and different per flavor.
func imageBody(path string) []byte {
	return []byte(strings.Repeat("talos raw image "+path+"\n", 1024))
}

func (f *Factory) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.fetches[r.URL.Path]++
	status := f.fail[r.URL.Path]
	f.mu.Unlock()
	if !strings.HasPrefix(r.URL.Path, "/image/") {
		http.NotFound(w, r)
		return
	}
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	w.Header().Set("Content-Type", "application/x-xz")
	w.Write(imageBody(r.URL.Path))
}

// Close stops the server.
func (f *Factory) Close() { f.srv.Close() }
