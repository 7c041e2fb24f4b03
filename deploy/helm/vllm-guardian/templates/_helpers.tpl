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
{{- .Values.priorityClass.name | default (printf "%s-node-critical" (include "vllm-guardian.fullname" .)) -}}
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
{{- if .Values.webConfig.enabled -}}
{{- if not $http -}}
{{- fail "webConfig.enabled needs config.api.http (the listener it protects)" -}}
{{- end -}}
{{- $api := deepCopy (default dict $cfg.api) -}}
{{- $_ := set $api "web_config_file" "/etc/guardian-web/web.yml" -}}
{{- $_ := set $cfg "api" $api -}}
{{- end -}}
{{- if .Values.trust.existingSecret -}}
{{- $gates := deepCopy (default dict $cfg.gates) -}}
{{- $trust := deepCopy (default dict $gates.trust) -}}
{{- if $trust.key_env -}}
{{- fail "trust.existingSecret sets config.gates.trust.keys_file: remove config.gates.trust.key_env" -}}
{{- end -}}
{{- $_ := set $trust "keys_file" (printf "/etc/guardian-trust/%s" .Values.trust.key) -}}
{{- $_ := set $gates "trust" $trust -}}
{{- $_ := set $cfg "gates" $gates -}}
{{- end -}}
{{- if .Values.redis.passwordSecret.name -}}
{{- $alerts := deepCopy (default dict $cfg.alerts) -}}
{{- if $alerts.password_env -}}
{{- fail "redis.passwordSecret sets config.alerts.password_file: remove config.alerts.password_env" -}}
{{- end -}}
{{- $_ := set $alerts "password_file" (printf "/etc/guardian-redis/%s" .Values.redis.passwordSecret.key) -}}
{{- $_ := set $cfg "alerts" $alerts -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* The web config document (exporter-toolkit's format), checked: TLS from secretName or inline
PEM (not both), the client CA where client certificates are verified, at least TLS or a user. */}}
{{- define "vllm-guardian.webConfig" -}}
{{- $w := .Values.webConfig -}}
{{- $doc := dict -}}
{{- if $w.tls.enabled -}}
{{- if and $w.tls.secretName (or $w.tls.cert $w.tls.key) -}}
{{- fail "webConfig.tls: set secretName or cert and key, not both" -}}
{{- end -}}
{{- if and (not $w.tls.secretName) (not (and $w.tls.cert $w.tls.key)) -}}
{{- fail "webConfig.tls: needs secretName (a kubernetes.io/tls Secret) or cert and key (PEM)" -}}
{{- end -}}
{{- $dir := ternary "/etc/guardian-tls" "/etc/guardian-web" (not (empty $w.tls.secretName)) -}}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) "client_auth_type" $w.tls.clientAuthType "min_version" $w.tls.minVersion -}}
{{- if ne $w.tls.clientAuthType "NoClientCert" -}}
{{- if and (not $w.tls.secretName) (not $w.tls.clientCA) -}}
{{- fail (printf "webConfig.tls.clientCA: required with clientAuthType %s (the CA of the client certificates)" $w.tls.clientAuthType) -}}
{{- end -}}
{{- $_ := set $tls "client_ca_file" (printf "%s/ca.crt" $dir) -}}
{{- end -}}
{{- $_ := set $doc "tls_server_config" $tls -}}
{{- end -}}
{{- if $w.basicAuthUsers -}}
{{- $_ := set $doc "basic_auth_users" $w.basicAuthUsers -}}
{{- end -}}
{{- if not $doc -}}
{{- fail "webConfig.enabled: asks for neither TLS (webConfig.tls.enabled) nor basicAuthUsers" -}}
{{- end -}}
{{- toYaml $doc -}}
{{- end -}}

{{/* "exec" when the kubelet could not pass the listener's checks (basic auth, a client
certificate required): the liveness probe then asks `guardian healthz` over the control socket;
"https" with TLS alone (the kubelet does not verify the certificate); else "http". */}}
{{- define "vllm-guardian.probe" -}}
{{- $w := .Values.webConfig -}}
{{- if and $w.enabled (or $w.basicAuthUsers (and $w.tls.enabled (eq $w.tls.clientAuthType "RequireAndVerifyClientCert"))) -}}
exec
{{- else if and $w.enabled $w.tls.enabled -}}
https
{{- else -}}
http
{{- end -}}
{{- end -}}

{{/* scheme, tlsConfig and basicAuth of a PodMonitor / ServiceMonitor endpoint, from webConfig. */}}
{{- define "vllm-guardian.scrapeAuth" -}}
{{- $w := .Values.webConfig -}}
{{- if $w.enabled -}}
{{- if $w.tls.enabled -}}
{{- if not $w.scrape.tlsConfig -}}
{{- fail "webConfig.scrape.tlsConfig: required with TLS and a monitor (ca and serverName to verify the guardian, or insecureSkipVerify: true)" -}}
{{- end }}
scheme: https
tlsConfig:
  {{- toYaml $w.scrape.tlsConfig | nindent 2 }}
{{- end }}
{{- if $w.basicAuthUsers }}
{{- if not $w.scrape.basicAuth -}}
{{- fail "webConfig.scrape.basicAuth: required with basicAuthUsers and a monitor (a Secret with the username and password)" -}}
{{- end }}
basicAuth:
  {{- toYaml $w.scrape.basicAuth | nindent 2 }}
{{- end -}}
{{- end -}}
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
