{{/* Chart name. */}}
{{- define "gpufabric.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every object name: <release>-<chart>, or the release name when it already contains the chart name. */}}
{{- define "gpufabric.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "gpufabric.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gpufabric.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of a component: include with (list $ "scheduler"). */}}
{{- define "gpufabric.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "gpufabric.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* All labels of a component's objects: include with (list $ "scheduler"). */}}
{{- define "gpufabric.componentLabels" -}}
{{ include "gpufabric.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* Image reference: include with (list $ .Values.scheduler.image). */}}
{{- define "gpufabric.image" -}}
{{- $ := index . 0 -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $.Chart.AppVersion $img.tag) }}
{{- end }}

{{- define "gpufabric.kubeletPlugin.fullname" -}}
{{- printf "%s-kubelet-plugin" (include "gpufabric.fullname" .) }}
{{- end }}

{{- define "gpufabric.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "gpufabric.fullname" .) }}
{{- end }}

{{- define "gpufabric.kubeletPlugin.serviceAccountName" -}}
{{- default (include "gpufabric.kubeletPlugin.fullname" .) .Values.kubeletPlugin.serviceAccount.name }}
{{- end }}

{{- define "gpufabric.scheduler.serviceAccountName" -}}
{{- default (include "gpufabric.scheduler.fullname" .) .Values.scheduler.serviceAccount.name }}
{{- end }}

{{/* The user name the kubelet plugin's service account authenticates as. */}}
{{- define "gpufabric.kubeletPlugin.userName" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpufabric.kubeletPlugin.serviceAccountName" .) }}
{{- end }}

{{/* The user name the scheduler's service account authenticates as. */}}
{{- define "gpufabric.scheduler.userName" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpufabric.scheduler.serviceAccountName" .) }}
{{- end }}

{{/* The path of the mock fabric file inside the plugin container. */}}
{{- define "gpufabric.kubeletPlugin.mockFabricPath" -}}
/etc/gpufabric/fabric/fabric.yaml
{{- end }}

{{/* The DRA driver name (fixed: the DeviceClasses and the plugin use it). */}}
{{- define "gpufabric.driverName" -}}
gpufabric.dev
{{- end }}

{{- define "gpufabric.grouper.fullname" -}}
{{- printf "%s-grouper" (include "gpufabric.fullname" .) }}
{{- end }}

{{- define "gpufabric.grouper.serviceAccountName" -}}
{{- default (include "gpufabric.grouper.fullname" .) .Values.grouper.serviceAccount.name }}
{{- end }}

{{/* The user name the grouper's service account authenticates as. */}}
{{- define "gpufabric.grouper.userName" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpufabric.grouper.serviceAccountName" .) }}
{{- end }}
