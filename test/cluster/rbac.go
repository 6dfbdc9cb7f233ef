package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/cozystack/csi-clone-sidecar/test/tools"
)

// The sidecar runs as it does in production: as the ServiceAccount that the
// bindings of deploy/rbac name, with exactly the roles deploy/rbac ships.
// The harness renders deploy/rbac with kubectl's kustomize (the way
// docs/install.md applies it), creates that ServiceAccount, applies the
// objects and writes a kubeconfig holding a token of the ServiceAccount. A
// permission missing from deploy/rbac thus fails the e2e tests.

// RBACEdit changes the RBAC objects rendered from deploy/rbac before they are
// applied.
type RBACEdit func(objs []*unstructured.Unstructured) error

// rbacManager is the field manager of the harness's server-side applies: a
// later apply of an edited role replaces the rules the earlier one set.
const rbacManager = "csi-clone-e2e"

// rbacGVRs are the kinds deploy/rbac may contain.
var rbacGVRs = map[string]schema.GroupVersionResource{
	"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	"Role":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	"RoleBinding":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
}

// RenderRBAC renders deploy/rbac with `kubectl kustomize`.
func RenderRBAC() ([]*unstructured.Unstructured, error) {
	kubectl, err := tools.Bin("kubectl")
	if err != nil {
		return nil, fmt.Errorf("kubectl (its built-in kustomize renders deploy/rbac): %w", err)
	}
	dir := filepath.Join(repoRoot(), "deploy", "rbac")
	var stderr bytes.Buffer
	cmd := exec.Command(kubectl, "kustomize", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize %s: %v: %s", dir, err, stderr.String())
	}
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		o := &unstructured.Unstructured{}
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("kubectl kustomize %s: %w", dir, err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, o)
		}
	}
}

// sidecarServiceAccount is the one ServiceAccount every binding names; it
// must live in NamespaceCSI, where the sidecar keeps its lease and ledger.
func sidecarServiceAccount(objs []*unstructured.Unstructured) (string, error) {
	var names []string
	for _, o := range objs {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			if m["kind"] != "ServiceAccount" {
				continue
			}
			if m["namespace"] != NamespaceCSI {
				return "", fmt.Errorf("%s %s binds ServiceAccount %v/%v; the harness runs the sidecar in %s",
					o.GetKind(), o.GetName(), m["namespace"], m["name"], NamespaceCSI)
			}
			if n, _ := m["name"].(string); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) != 1 {
		return "", fmt.Errorf("deploy/rbac binds ServiceAccounts %q; want exactly one", names)
	}
	return names[0], nil
}

// sidecarIdentity applies the sidecar's RBAC (edited by edit) and returns
// the path of a kubeconfig with a token of its ServiceAccount; with
// Options.SidecarAdmin, the admin kubeconfig.
func (c *Cluster) sidecarIdentity(edit RBACEdit) (string, error) {
	if c.opts.SidecarAdmin {
		return c.Kubeconfig, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	objs, err := RenderRBAC()
	if err != nil {
		return "", err
	}
	sa, err := sidecarServiceAccount(objs)
	if err != nil {
		return "", err
	}
	if edit != nil {
		if err := edit(objs); err != nil {
			return "", fmt.Errorf("editing deploy/rbac: %w", err)
		}
	}
	acct := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: NamespaceCSI}}
	if _, err := c.Client.CoreV1().ServiceAccounts(NamespaceCSI).Create(ctx, acct, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("ServiceAccount %s/%s: %w", NamespaceCSI, sa, err)
	}
	for _, o := range objs {
		gvr, ok := rbacGVRs[o.GetKind()]
		if !ok {
			return "", fmt.Errorf("deploy/rbac holds a %s (%s); the harness applies only RBAC kinds", o.GetKind(), o.GetName())
		}
		_, err := c.Dynamic.Resource(gvr).Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o,
			metav1.ApplyOptions{FieldManager: rbacManager, Force: true})
		if err != nil {
			return "", fmt.Errorf("apply %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	tr, err := c.Client.CoreV1().ServiceAccounts(NamespaceCSI).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(24 * 3600))}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", NamespaceCSI, sa, err)
	}
	path := filepath.Join(c.Dir, "sidecar.kubeconfig")
	return path, os.WriteFile(path, kubeconfig(c.Host, c.pki.caPEM, sa, tr.Status.Token), 0o600)
}

// StopSidecar stops csi-clone-sidecar and the kubernetes-csi sidecars that
// dial it (they exit when its socket goes away); StartSidecar starts them
// again. Between the two, no CSI call reaches the driver.
func (c *Cluster) StopSidecar() error {
	if c.opts.NoSidecar {
		return errors.New("no sidecar in this cluster (Options.NoSidecar)")
	}
	var errs []error
	for _, name := range append(slices.Clone(csiSidecarNames), "csi-clone-sidecar") {
		errs = append(errs, c.stopComponent(name))
	}
	return errors.Join(errs...)
}

// StartSidecar starts what StopSidecar stopped: a new csi-clone-sidecar
// process, as after a container restart, on the same sockets and metrics
// endpoint. It first applies the sidecar's RBAC again, edited by edit (which
// replaces Options.SidecarRBAC; nil: exactly as deploy/rbac ships it).
func (c *Cluster) StartSidecar(edit RBACEdit) error {
	c.rbacEdit = edit
	if err := c.startSidecar(); err != nil {
		return fmt.Errorf("start csi-clone-sidecar: %w", err)
	}
	return c.startDialers()
}

// stopComponent ends one component and forgets it, so that it can be
// started again under the same name.
func (c *Cluster) stopComponent(name string) error {
	c.mu.Lock()
	p := c.procs[name]
	delete(c.procs, name)
	c.order = slices.DeleteFunc(c.order, func(n string) bool { return n == name })
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("no component %s is running", name)
	}
	return p.stop(5 * time.Second)
}

// writeAuditPolicy makes kube-apiserver record, at Metadata level, every
// request of the ServiceAccounts of NamespaceCSI (the sidecar's) and nothing
// else: which verbs on which resources the sidecar used, and which were
// refused.
func (c *Cluster) writeAuditPolicy() (string, error) {
	const policy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:%s"]
  - level: None
`
	c.AuditLog = filepath.Join(c.logDir, "audit.jsonl")
	path := filepath.Join(c.Dir, "pki", "audit-policy.yaml")
	return path, os.WriteFile(path, fmt.Appendf(nil, policy, NamespaceCSI), 0o644)
}

// Request is one API request of the sidecar, as kube-apiserver audited it.
type Request struct {
	Time                time.Time
	User                string
	Verb                string // get, list, watch, create, update, patch, ...
	APIGroup, Resource  string
	Namespace, Name     string
	Code                int // HTTP status of the response (403: refused by RBAC)
	Subresource, Reason string
	URI                 string // the request's path and query
}

type auditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		APIGroup    string `json:"apiGroup"`
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"responseStatus"`
	StageTimestamp metav1.MicroTime `json:"stageTimestamp"`
}

// SidecarRequests reads the audit log: every resource request the sidecar's
// ServiceAccount made so far (a watch appears once it has started).
func (c *Cluster) SidecarRequests() ([]Request, error) {
	f, err := os.Open(c.AuditLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Request
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		if e.ObjectRef == nil || e.ResponseStatus == nil {
			continue // discovery and other non-resource requests
		}
		out = append(out, Request{
			Time: e.StageTimestamp.Time, User: e.User.Username, Verb: e.Verb,
			APIGroup: e.ObjectRef.APIGroup, Resource: e.ObjectRef.Resource, Subresource: e.ObjectRef.Subresource,
			Namespace: e.ObjectRef.Namespace, Name: e.ObjectRef.Name,
			Code: e.ResponseStatus.Code, Reason: e.ResponseStatus.Reason, URI: e.RequestURI,
		})
	}
	return out, sc.Err()
}
