package report

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/cozystack/csi-clone-sidecar/cloner/config"
)

// CheckReport is one check of the install that no verdict covers.
type CheckReport struct {
	Check string `json:"check"`
	// Status is ok, missing or unknown (the check could not read what it needs).
	Status  string `json:"status"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// The statuses of a check.
const (
	CheckOK      = "ok"
	CheckMissing = "missing"
	CheckUnknown = "unknown"
)

// GrafanaDashboardGVR is grafana-operator v5's dashboard kind.
var GrafanaDashboardGVR = schema.GroupVersionResource{Group: "grafana.integreatly.org", Version: "v1beta1", Resource: "grafanadashboards"}

// dashboardConfigMap is the ConfigMap both the chart and deploy/monitoring
// ship the dashboard in; the GrafanaDashboard refers to it.
const dashboardConfigMap = "csi-clone-sidecar-dashboard"

const sidecarLabel = "app.kubernetes.io/name=csi-clone-sidecar"

// checkDashboard finds a dashboard that was installed without its
// GrafanaDashboard although the cluster serves the kind: the chart renders
// it only where the kind is served at install time, so after a cold install
// that put the sidecar in before grafana-operator, the dashboard stays out
// until the release is upgraded again.
func checkDashboard(ctx context.Context, clients config.Clients, namespace string) CheckReport {
	c := CheckReport{Check: "dashboard"}
	gv := GrafanaDashboardGVR.GroupVersion().String()
	if !served(clients, gv, "GrafanaDashboard") {
		c.Status, c.Message = CheckOK, "the cluster does not serve "+gv+": no GrafanaDashboard expected"
		return c
	}
	cms, err := clients.Kube.CoreV1().ConfigMaps(namespace).List(ctx, metav1.ListOptions{LabelSelector: sidecarLabel})
	if err != nil {
		c.Status, c.Message = CheckUnknown, "listing the dashboard's ConfigMap: "+err.Error()
		return c
	}
	var where []string
	for _, cm := range cms.Items {
		if cm.Name == dashboardConfigMap {
			where = append(where, cm.Namespace)
		}
	}
	if len(where) == 0 {
		c.Status, c.Message = CheckOK, "no ConfigMap "+dashboardConfigMap+": the dashboard is not installed (dashboard.enabled=false)"
		return c
	}
	for _, ns := range where {
		gds, err := clients.Dynamic.Resource(GrafanaDashboardGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sidecarLabel})
		if err != nil {
			c.Status, c.Message = CheckUnknown, "listing GrafanaDashboards in "+ns+": "+err.Error()
			return c
		}
		if len(gds.Items) == 0 {
			c.Status = CheckMissing
			c.Message = fmt.Sprintf("GrafanaDashboard csi-clone-sidecar missing in %s while the cluster serves %s (the chart left it out: grafana-operator's CRD was not there when the release was installed)", ns, gv)
			c.Fix = "upgrade the release once more, on Cozystack: flux reconcile hr linstor -n cozy-linstor --force (docs/cozystack.md); " +
				"or, if no Grafana should get it, dashboard.grafanaOperator.enabled=false"
			return c
		}
	}
	c.Status, c.Message = CheckOK, "GrafanaDashboard csi-clone-sidecar present"
	return c
}

// served says whether the API server serves kind in groupVersion.
func served(clients config.Clients, groupVersion, kind string) bool {
	list, err := clients.Kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Kind == kind {
			return true
		}
	}
	return false
}
