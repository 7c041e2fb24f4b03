{{/* The release's full name, at most 63 characters. */}}
{{- define "vllm-guardian.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "vllm-guardian.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "vllm-guardian.labels" -}}
{{ include "vllm-guardian.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "vllm-guardian.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vllm-guardian.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vllm-guardian.priorityClassName" -}}
{{- if .Values.priorityClassName -}}
{{- .Values.priorityClassName -}}
{{- else if .Values.priorityClass.create -}}
{{- .Values.priorityClass.name -}}
{{- end -}}
{{- end -}}

{{/* The guardian's config document: .Values.config with policy.dry_run set from .Values.mode. */}}
{{- define "vllm-guardian.config" -}}
{{- if not (has .Values.mode (list "observe" "remediate")) -}}
{{- fail (printf "mode must be observe or remediate, not %q" .Values.mode) -}}
{{- end -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $http := (default dict $cfg.api).http -}}
{{- if and $http (not (hasSuffix (printf ":%v" (int .Values.metricsPort)) (toString $http))) -}}
{{- fail (printf "config.api.http %q must listen on metricsPort %v (the probes and the PodMonitor use it)" (toString $http) .Values.metricsPort) -}}
{{- end -}}
{{- $policy := deepCopy (default dict $cfg.policy) -}}
{{- $_ := set $policy "dry_run" (eq .Values.mode "observe") -}}
{{- $_ := set $cfg "policy" $policy -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The kubernetes section of the config, with the guardian's defaults for missing keys. */}}
{{- define "vllm-guardian.kube" -}}
{{- $k := dict "readiness_gate" true "events" true "node_condition" false "taint_on_device_fault" false "taint_key" "vllm-guardian.io/accel-fault" "pod_removal" "evict" -}}
{{- toYaml (mergeOverwrite $k (deepCopy (default dict .Values.config.kubernetes))) -}}
{{- end -}}

{{/* The namespaces the guardian is granted: .Values.namespaces plus those the targets name. */}}
{{- define "vllm-guardian.namespaces" -}}
{{- $ns := list -}}
{{- range .Values.namespaces -}}{{- $ns = append $ns . -}}{{- end -}}
{{- range (default list .Values.config.targets) -}}
{{- $km := (default dict (default dict .match).kubernetes) -}}
{{- if $km.namespace -}}{{- $ns = append $ns $km.namespace -}}{{- end -}}
{{- if (default dict .restart).namespace -}}{{- $ns = append $ns .restart.namespace -}}{{- end -}}
{{- end -}}
{{- toYaml (dict "items" ($ns | uniq | sortAlpha)) -}}
{{- end -}}
