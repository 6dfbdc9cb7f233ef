// Package deploy holds no code: it is the home of the tests that check the
// manifests, alert rules and dashboard in this directory with the real tools
// (promtool, kubectl's kustomize, Kubernetes' strategic merge, the kernel's
// socket permission checks). Run them with `go test ./deploy`.
package deploy
