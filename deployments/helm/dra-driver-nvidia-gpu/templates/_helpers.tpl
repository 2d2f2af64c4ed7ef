{{/*
Names. Object names follow upstream's chart so that a cluster switching
charts keeps the same objects: "name" (chart name or nameOverride) prefixes
the component objects, "fullname" the service accounts.
*/}}
{{- define "dra-driver-nvidia-gpu.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dra-driver-nvidia-gpu.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "dra-driver-nvidia-gpu.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "dra-driver-nvidia-gpu.chart" -}}
{{- printf "%s-%s" (default .Chart.Name .Values.nameOverride) .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every top-level object. */}}
{{- define "dra-driver-nvidia-gpu.labels" -}}
helm.sh/chart: {{ include "dra-driver-nvidia-gpu.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{ include "dra-driver-nvidia-gpu.templateLabels" . }}
{{- end }}

{{/* Labels of every pod template (and of the objects, through "labels"). */}}
{{- define "dra-driver-nvidia-gpu.templateLabels" -}}
app.kubernetes.io/name: {{ include "dra-driver-nvidia-gpu.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The one label that selects a component's pods: "<name>-component: <component>"
(upstream's key, so a DaemonSet's immutable selector survives a chart switch),
or selectorLabelsOverride. Call with (dict "context" $ "componentName" "...").
*/}}
{{- define "dra-driver-nvidia-gpu.selectorLabels" -}}
{{- if not (and (hasKey . "context") (hasKey . "componentName")) -}}
{{- fail "internal: dra-driver-nvidia-gpu.selectorLabels needs context and componentName" -}}
{{- end -}}
{{- if .context.Values.selectorLabelsOverride -}}
{{ toYaml .context.Values.selectorLabelsOverride }}
{{- else -}}
{{ default .context.Chart.Name .context.Values.nameOverride }}-component: {{ .componentName }}
{{- end }}
{{- end }}

{{- define "dra-driver-nvidia-gpu.fullimage" -}}
{{- .Values.image.repository -}}:{{- .Values.image.tag | default (printf "v%s" .Chart.AppVersion) -}}
{{- end }}

{{/*
Base service account name; the controller's and the plugins' accounts append
"-controller" and "-kubeletplugin" (see pluginServiceAccountName).
*/}}
{{- define "dra-driver-nvidia-gpu.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (printf "%s-service-account" (include "dra-driver-nvidia-gpu.fullname" .)) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The service account the kubelet-plugin pods really run as. The
ValidatingAdmissionPolicy matches this name; upstream's matched the base name
without the suffix and so restricted nobody (upstream issue #1317).
*/}}
{{- define "dra-driver-nvidia-gpu.pluginServiceAccountName" -}}
{{- include "dra-driver-nvidia-gpu.serviceAccountName" . }}-kubeletplugin
{{- end }}

{{- define "dra-driver-nvidia-gpu.controllerServiceAccountName" -}}
{{- include "dra-driver-nvidia-gpu.serviceAccountName" . }}-controller
{{- end }}

{{- define "dra-driver-nvidia-gpu.webhookServiceAccountName" -}}
{{- if .Values.webhook.serviceAccount.create }}
{{- default (printf "%s-webhook-service-account" (include "dra-driver-nvidia-gpu.fullname" .)) .Values.webhook.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.webhook.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Namespaces where compute-domain daemons run: the driver's, plus those listed
in the controller's ADDITIONAL_NAMESPACES env entry (comma-separated).
Returns them comma-joined, without duplicates.
*/}}
{{- define "dra-driver-nvidia-gpu.namespaces" -}}
{{- $all := list (include "dra-driver-nvidia-gpu.namespace" . | trim) }}
{{- range .Values.controller.containers.computeDomain.env }}
{{- if and (eq .name "ADDITIONAL_NAMESPACES") .value }}
{{- range splitList "," .value }}
{{- if trim . }}
{{- $all = append $all (trim .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "," (uniq $all) -}}
{{- end -}}

{{/*
resource.k8s.io group version for DeviceClasses: resourceApiVersion, else the
highest the cluster serves (v1 > v1beta2 > v1beta1), else empty (validation.yaml
then fails with a message).
*/}}
{{- define "dra-driver-nvidia-gpu.resourceApiVersion" -}}
{{- if .Values.resourceApiVersion -}}
{{- .Values.resourceApiVersion -}}
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1" -}}
resource.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta2" -}}
resource.k8s.io/v1beta2
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1" -}}
resource.k8s.io/v1beta1
{{- end -}}
{{- end -}}

{{/* "true" in hostManaged IMEX mode, else empty. */}}
{{- define "dra-driver-nvidia-gpu.hostManagedIMEX" -}}
{{- if eq (toString (dig "mode" "" (.Values.resources.computeDomains.imex | default dict))) "hostManaged" -}}
true
{{- end -}}
{{- end -}}

{{/* "true" in channel IMEX isolation, else empty. */}}
{{- define "dra-driver-nvidia-gpu.channelIsolation" -}}
{{- if eq (toString (dig "isolation" "" (.Values.resources.computeDomains.imex | default dict))) "channel" -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when feature gate $name is set to true. Call with (list $ "Gate"). */}}
{{- define "dra-driver-nvidia-gpu.gateOn" -}}
{{- $root := index . 0 -}}
{{- $gates := $root.Values.featureGates | default dict -}}
{{- if eq (toString (index $gates (index . 1) | default false)) "true" -}}
true
{{- end -}}
{{- end -}}

{{/* "true" when feature gate $name is set to false (a gate on by default
turned off). Call with (list $ "Gate"). */}}
{{- define "dra-driver-nvidia-gpu.gateOff" -}}
{{- $root := index . 0 -}}
{{- $gates := $root.Values.featureGates | default dict -}}
{{- if and (hasKey $gates (index . 1)) (eq (toString (index $gates (index . 1))) "false") -}}
true
{{- end -}}
{{- end -}}

{{/* FEATURE_GATES value: "A=true,B=false," (the form our binaries and upstream's parse). */}}
{{- define "dra-driver-nvidia-gpu.featureGatesEnv" -}}
{{- range $key, $value := .Values.featureGates }}{{ $key }}={{ $value }},{{ end }}
{{- end -}}

{{/*
imex mode and isolation checks, so that a bad combination fails `helm install`
with the key to change rather than crash-looping pods.
*/}}
{{- define "dra-driver-nvidia-gpu.validateIMEXConfig" -}}
{{- $imex := .Values.resources.computeDomains.imex | default dict -}}
{{- $mode := toString (dig "mode" "driverManaged" $imex) -}}
{{- $isolation := toString (dig "isolation" "domain" $imex) -}}
{{- if eq $mode "hostManaged" -}}
{{- if not (include "dra-driver-nvidia-gpu.gateOn" (list . "HostManagedIMEXDaemon")) -}}
{{- fail "resources.computeDomains.imex.mode=hostManaged needs featureGates.HostManagedIMEXDaemon=true: set that gate, or use mode driverManaged" -}}
{{- end -}}
{{- else if ne $mode "driverManaged" -}}
{{- fail (printf "resources.computeDomains.imex.mode=%q is not a mode: use \"driverManaged\" or \"hostManaged\"" $mode) -}}
{{- end -}}
{{- if not (has $isolation (list "" "domain" "channel")) -}}
{{- fail (printf "resources.computeDomains.imex.isolation=%q is not an isolation: use \"domain\" or \"channel\"" $isolation) -}}
{{- end -}}
{{- end -}}

{{/* imagePullSecrets names, comma-separated (for pods the driver creates itself). */}}
{{- define "dra-driver-nvidia-gpu.imagePullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets }}{{ $names = append $names .name }}{{ end -}}
{{- join "," $names -}}
{{- end -}}

{{/*
The drivers and DeviceClasses the webhook's matchConditions send to it, as
CEL lists: every class this chart can create, whether or not it does (a
claim may name a class before the chart that creates it is installed).
*/}}
{{- define "dra-driver-nvidia-gpu.webhookDrivers" -}}
['gpu.nvidia.com', 'compute-domain.nvidia.com']
{{- end }}
{{- define "dra-driver-nvidia-gpu.webhookClasses" -}}
['gpu.nvidia.com', 'mig.nvidia.com', 'vfio.gpu.nvidia.com', 'compute-domain-default-channel.nvidia.com', 'compute-domain-daemon.nvidia.com']
{{- end }}
