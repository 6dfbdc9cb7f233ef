{{/*
csi-clone-sidecar.crdObjects: the objects of the chart whose kind a CRD
serves (an operator's, not Kubernetes'), as JSON {role: "group/version/Kind"},
only those the values ask for. Each template renders its object only where
the cluster serves that kind (.Capabilities.APIVersions.Has, as Cozystack's
linstor package guards its VMPodScrape): a missing operator never fails the
release the chart is installed with. NOTES.txt names what was left out.
*/}}
{{- define "csi-clone-sidecar.crdObjects" -}}
{{- $apis := dict -}}
{{- $kind := .Values.monitoring.kind -}}
{{- if eq $kind "victoria-metrics" -}}
{{- $_ := set $apis "scrape" "operator.victoriametrics.com/v1beta1/VMServiceScrape" -}}
{{- $_ := set $apis "rules" "operator.victoriametrics.com/v1beta1/VMRule" -}}
{{- else if eq $kind "prometheus-operator" -}}
{{- $_ := set $apis "scrape" "monitoring.coreos.com/v1/ServiceMonitor" -}}
{{- $_ := set $apis "rules" "monitoring.coreos.com/v1/PrometheusRule" -}}
{{- end -}}
{{- if and .Values.dashboard.enabled .Values.dashboard.grafanaOperator.enabled -}}
{{- $_ := set $apis "dashboard" "grafana.integreatly.org/v1beta1/GrafanaDashboard" -}}
{{- end -}}
{{- toJson $apis -}}
{{- end -}}

{{/*
csi-clone-sidecar.served: the "group/version/Kind" of a role of
csi-clone-sidecar.crdObjects when the values ask for it and the cluster
serves it, else "". Context: (list $ "role").
*/}}
{{- define "csi-clone-sidecar.served" -}}
{{- $root := index . 0 -}}
{{- $gvk := get (include "csi-clone-sidecar.crdObjects" $root | fromJson) (index . 1) -}}
{{- if and $gvk ($root.Capabilities.APIVersions.Has $gvk) -}}
{{- $gvk -}}
{{- end -}}
{{- end -}}

{{/*
csi-clone-sidecar.dashboardName: the GrafanaDashboard's name, which carries a
digest of its instanceSelector. grafana-operator makes instanceSelector
immutable, so a changed selector (Cozystack v1 moved the platform's Grafana
from the HelmRelease "monitoring" to "monitoring-system") must be a new
object: under a new name, helm upgrade creates it and deletes the old one
as any object that left the release, with no hook and no manual delete.
*/}}
{{- define "csi-clone-sidecar.dashboardName" -}}
{{- printf "csi-clone-sidecar-%s" (toJson .instanceSelector | sha256sum | trunc 8) -}}
{{- end -}}

{{/*
csi-clone-sidecar.notes: NOTES.txt's text, a named template so that a test
can render it (helm template prints no notes).
*/}}
{{- define "csi-clone-sidecar.notes" -}}
csi-clone-sidecar {{ .Chart.AppVersion }} in namespace {{ .Release.Namespace }}.

Image: {{ include "csi-clone-sidecar.image" . }}
From a mirror: copy the image there by digest and set
sidecar.image.repository=<mirror>/csi-clone-sidecar; the digest stays
(docs/release.md, Mirror).
{{- $missing := list }}
{{- range $role, $gvk := include "csi-clone-sidecar.crdObjects" . | fromJson }}
{{- if not ($.Capabilities.APIVersions.Has $gvk) }}
{{- $missing = append $missing $gvk }}
{{- end }}
{{- end }}
{{- if $missing }}

Left out, because this cluster does not serve their kind (install the
operator and upgrade the release to add them, or turn off what asks for
them: monitoring.kind=none, dashboard.grafanaOperator.enabled=false):
{{- range $missing }}
  - {{ base . }} ({{ dir . }})
{{- end }}
{{- end }}

The container itself goes into the CSI controller's pod template:
docs/install.md, on Cozystack docs/cozystack.md.
{{- end -}}
