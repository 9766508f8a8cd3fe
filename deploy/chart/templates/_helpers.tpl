{{/*
Names are fixed, not derived from the release: the controller's Lease
(configrollout-controller, the controller's default --lease-name) and its cluster-scoped
roles exist once per cluster, so one release per cluster.
*/}}
{{- define "configrollout.name" -}}configrollout-controller{{- end -}}

{{/* Labels Helm adds to every object's metadata (never to selectors). */}}
{{- define "configrollout.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "configrollout.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
