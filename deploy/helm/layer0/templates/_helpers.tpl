{{/* The name of every object of the release. */}}
{{- define "layer0.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The labels that select the release's pods. */}}
{{- define "layer0.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels. */}}
{{- define "layer0.labels" -}}
{{ include "layer0.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* How many replicas share the limits, for store.replicas. */}}
{{- define "layer0.replicas" -}}
{{- if .Values.redis.replicas -}}
{{- .Values.redis.replicas -}}
{{- else if .Values.autoscaling.enabled -}}
{{- .Values.autoscaling.minReplicas -}}
{{- else -}}
{{- .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{/* layer0.yaml: values.config with the chart's own settings over it. */}}
{{- define "layer0.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $server := get $cfg "server" | default dict -}}
{{- $_ := set $server "addr" (printf "0.0.0.0:%v" .Values.ports.api) -}}
{{- $_ := set $server "admin_addr" (printf "0.0.0.0:%v" .Values.ports.admin) -}}
{{- $_ := set $server "shutdown_timeout" .Values.shutdownTimeout -}}
{{- $_ := set $cfg "server" $server -}}
{{- if .Values.keys -}}
{{- $_ := set $cfg "keys" .Values.keys -}}
{{- end -}}
{{- if .Values.redis.enabled -}}
{{- $store := dict "kind" "redis" "url" .Values.redis.url "timeout" .Values.redis.timeout "on_error" .Values.redis.onError "replicas" (include "layer0.replicas" . | int) "lease_ttl" .Values.redis.leaseTTL -}}
{{- if .Values.redis.passwordEnv -}}
{{- $_ := set $store "password_env" .Values.redis.passwordEnv -}}
{{- end -}}
{{- if .Values.redis.cache.enabled -}}
{{- $_ := set $store "cache" (dict "enabled" true "max_entry_bytes" (.Values.redis.cache.maxEntryBytes | int64) "fill_wait" .Values.redis.cache.fillWait) -}}
{{- end -}}
{{- $_ := set $cfg "store" $store -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Seconds of a Go duration value ("30s", "2m", "1m30s", "500ms"), rounded up. */}}
{{- define "layer0.seconds" -}}
{{- $d := toString . -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "[0-9.]+(ms|s|m|h)" $d -1 -}}
{{- $n := regexFind "[0-9.]+" $part | float64 -}}
{{- $unit := regexReplaceAll "[0-9.]+" $part "" -}}
{{- if eq $unit "h" }}{{ $total = addf $total (mulf $n 3600) }}{{ end -}}
{{- if eq $unit "m" }}{{ $total = addf $total (mulf $n 60) }}{{ end -}}
{{- if eq $unit "s" }}{{ $total = addf $total $n }}{{ end -}}
{{- if eq $unit "ms" }}{{ $total = addf $total (divf $n 1000) }}{{ end -}}
{{- end -}}
{{- ceil $total | int -}}
{{- end -}}
