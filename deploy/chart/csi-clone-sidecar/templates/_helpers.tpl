{{/*
Named templates. Every object is called csi-clone-sidecar whatever the
release is called: the alert rules and the dashboard select on the scrape job
of that name (the Service's), and the Lease and ledger names are the binary's
defaults.
*/}}

{{/* csi-clone-sidecar.labels: the labels of every object of the chart. */}}
{{- define "csi-clone-sidecar.labels" -}}
app.kubernetes.io/name: csi-clone-sidecar
app.kubernetes.io/part-of: csi-clone-sidecar
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
csi-clone-sidecar.container: the sidecar container, one list item, for the
containers of a pod template. The context needs only .Values (this chart's:
from a parent chart pass .Subcharts.<name> or (dict "Values" ...)).
With admissionGuard.enabled it keeps the guard's parameters current
(--admission-params). It runs as uid 0 with no capability at all: the driver creates its socket as
root with the runtime's umask (srwxr-xr-x), and connecting to a unix socket
needs write permission, which only its owner has. That is how csi-provisioner,
csi-resizer and csi-snapshotter reach it too; the driver is left as it is.
*/}}
{{- define "csi-clone-sidecar.container" -}}
{{- $s := .Values.sidecar -}}
- name: csi-clone-sidecar
  image: {{ include "csi-clone-sidecar.image" . | quote }}
  args:
    - --csi-address=$(DRIVER_ADDRESS)
    - --listen-address=$(ADDRESS)
    - --leader-election=true
    - --leader-election-namespace=$(POD_NAMESPACE)
    - --http-endpoint=:{{ $s.metricsPort }}
    - --metrics-path=/metrics
    - --golden-namespace={{ $s.goldenNamespace }}
    - --stuck-after={{ $s.stuckAfter }}
    - --v={{ $s.logLevel }}
    {{- if and .Values.admissionGuard .Values.admissionGuard.enabled }}
    - --admission-params=true
    {{- if .Values.admissionGuard.allowClassMismatch }}
    - --admission-allow-class-mismatch=true
    {{- end }}
    {{- end }}
    {{- range $s.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: DRIVER_ADDRESS
      value: {{ $s.driverAddress | quote }}
    - name: ADDRESS
      value: {{ $s.listenAddress | quote }}
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          apiVersion: v1
          fieldPath: metadata.namespace
    # The garbage collector keeps the process under 90 % of its limit
    # (docs/performance.md, Sizing).
    - name: MEMORY_LIMIT
      valueFrom:
        resourceFieldRef:
          containerName: csi-clone-sidecar
          resource: limits.memory
  ports:
    - name: clone-metrics
      containerPort: {{ $s.metricsPort }}
  # Liveness: only the relay (its socket accepts). The driver's Probe is
  # readiness' business: restarting the relay heals no driver and cuts
  # every connection it carries (docs/install.md, Health).
  livenessProbe:
    httpGet:
      path: /healthz
      port: clone-metrics
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 5
    failureThreshold: 6
  # Readiness: the relay and the driver's Probe. No Service sends CSI
  # traffic here; a not-ready pod only shows it (metrics are scraped all
  # the same) and holds a rollout back (docs/install.md, Health).
  readinessProbe:
    httpGet:
      path: /readyz
      port: clone-metrics
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 3
  resources:
    {{- toYaml $s.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: 0
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop:
        - ALL
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: {{ $s.socketVolume }}
      mountPath: {{ $s.socketMountPath }}
{{- end -}}

{{/*
csi-clone-sidecar.image: repository:tag, the tag defaulting to the chart's
appVersion, and @digest when one is set (make release pins it), e.g.
ghcr.io/cozystack/csi-clone-sidecar:v0.2.0@sha256:... From (dict "Values" ...)
there is no .Chart: the tag must then be set.
*/}}
{{- define "csi-clone-sidecar.image" -}}
{{- $img := .Values.sidecar.image -}}
{{- $tag := $img.tag -}}
{{- if and (not $tag) .Chart -}}
{{- $tag = .Chart.AppVersion -}}
{{- end -}}
{{- $tag = required "sidecar.image.tag: set it, or include the template with the chart's context (the tag defaults to its appVersion)" $tag -}}
{{- printf "%s:%s" $img.repository $tag -}}
{{- with $img.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/*
csi-clone-sidecar.repointedContainers: one sparse list item per repointed
kubernetes-csi sidecar, holding only its ADDRESS env entry. Merged by name
into the operator's containers (and their env by name), it changes nothing
else of them.
*/}}
{{- define "csi-clone-sidecar.repointedContainers" -}}
{{- $s := .Values.sidecar -}}
{{- range $s.repoint }}
- name: {{ . }}
  env:
    - name: ADDRESS
      value: {{ $s.listenAddress | quote }}
{{- end }}
{{- end -}}

{{/*
csi-clone-sidecar.podTemplateContainers: what a LinstorCluster's
spec.csiController.podTemplate.spec.containers gains: the sidecar and the
ADDRESS overrides. Cozystack's linstor chart includes it (docs/cozystack.md);
deploy/linstor/podtemplate.yaml is its rendering with the defaults.
*/}}
{{- define "csi-clone-sidecar.podTemplateContainers" -}}
{{ include "csi-clone-sidecar.container" . }}
{{ include "csi-clone-sidecar.repointedContainers" . | trim }}
{{- end -}}

{{/*
csi-clone-sidecar.monitoringLabels: the chart's labels plus monitoring.labels
(the chart's win where both set a key).
*/}}
{{- define "csi-clone-sidecar.monitoringLabels" -}}
{{- $own := include "csi-clone-sidecar.labels" . | fromYaml -}}
{{- toYaml (merge $own .Values.monitoring.labels) -}}
{{- end -}}

{{/*
csi-clone-sidecar.rules: the role rules of files/<name>.yaml, a generated copy
of deploy/rbac/<name>.yaml (`make chart`), where each rule says why.
*/}}
{{- define "csi-clone-sidecar.rules" -}}
{{- $role := .root.Files.Get (printf "files/%s.yaml" .file) | fromYaml -}}
{{- toYaml $role.rules -}}
{{- end -}}
