{{/*
Names and labels.
*/}}
{{- define "aap-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "aap-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "aap-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "aap-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "aap-gateway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "aap-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Where the configuration lives in the container: the ConfigMap is mounted at configDir and the
gateway is started with --config configDir/configFile (the image's CMD uses the same path).
*/}}
{{- define "aap-gateway.configDir" -}}/etc/aap-gateway{{- end }}
{{- define "aap-gateway.configFile" -}}gateway.yaml{{- end }}

{{- define "aap-gateway.configMapName" -}}
{{- default (printf "%s-config" (include "aap-gateway.fullname" .)) .Values.existingConfigMap }}
{{- end }}

{{- define "aap-gateway.secretName" -}}
{{- default (include "aap-gateway.fullname" .) .Values.secret.name }}
{{- end }}

{{/*
ConfigMap key of a mapping file: keys cannot hold "/", so <folder>__<file>.
*/}}
{{- define "aap-gateway.mappingKey" -}}
{{- printf "%s__%s" .folder .file }}
{{- end }}

{{/*
gateway.yaml: .Values.config with the listeners from .Values.ports, and the Redis backend of the
rate limits and of the idempotency keys when redis.enabled (the URL comes from the environment).
*/}}
{{- define "aap-gateway.config" -}}
{{- $config := deepCopy .Values.config }}
{{- $_ := set $config "listen" (printf "%s:%d" .Values.listenAddress (int .Values.ports.http)) }}
{{- $_ := set $config "admin_listen" (printf "%s:%d" .Values.listenAddress (int .Values.ports.admin)) }}
{{- if .Values.redis.enabled }}
{{- $rateLimit := deepCopy (default (dict) (get $config "rate_limit")) }}
{{- $_ := set $rateLimit "backend" "redis" }}
{{- $_ := set $config "rate_limit" $rateLimit }}
{{- $idempotency := deepCopy (default (dict) (get $config "idempotency")) }}
{{- $_ := set $idempotency "backend" "redis" }}
{{- $_ := set $config "idempotency" $idempotency }}
{{- end }}
{{- toYaml $config }}
{{- end }}
