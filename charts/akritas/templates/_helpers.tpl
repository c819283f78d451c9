{{/* The chart name, or nameOverride. */}}
{{- define "akritas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object name: fullnameOverride, else release name and chart name (once). */}}
{{- define "akritas.fullname" -}}
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

{{- define "akritas.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "akritas.labels" -}}
helm.sh/chart: {{ include "akritas.chart" . }}
{{ include "akritas.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "akritas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "akritas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pod's ServiceAccount: the created one, or an existing one. */}}
{{- define "akritas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "akritas.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The namespaces watched in operator mode, comma-separated (empty: every namespace). */}}
{{- define "akritas.watchedNamespaces" -}}
{{- if not .Values.watchAllNamespaces -}}
{{- .Values.watchNamespaces | default (list .Release.Namespace) | uniq | join "," -}}
{{- end -}}
{{- end }}

{{/* The operator's rules in a watched namespace (rbac.yaml says why each). */}}
{{- define "akritas.watchRules" }}
rules:
  - apiGroups: ["akritas.io"]
    resources: ["skills", "mcpadapters", "workspaces", "validatorprofiles", "notificationreceivers", "alertsources", "knowledgebases", "runschedules"]
    verbs: ["list", "watch"]
  - apiGroups: ["akritas.io"]
    resources: ["skills/status", "mcpadapters/status", "workspaces/status", "validatorprofiles/status", "notificationreceivers/status", "alertsources/status", "knowledgebases/status", "runschedules/status"]
    verbs: ["patch"]
  - apiGroups: ["akritas.io"]
    resources: ["runs"]
    verbs: ["list", "watch", "create", "patch", "delete"]
  - apiGroups: ["akritas.io"]
    resources: ["incidents"]
    verbs: ["list", "create", "patch", "delete"]
  - apiGroups: ["akritas.io"]
    resources: ["runs/status", "incidents/status"]
    verbs: ["patch"]
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["list", "watch"]
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
{{- end }}

{{- /* What the built-in Kubernetes tools read in a namespace (kubernetesTools.enabled):
get and list, never watch, never Secrets; pods/log through the kubelet. */}}
{{- define "akritas.kubernetesToolRules" }}
{{- if .Values.kubernetesTools.enabled }}
  - apiGroups: [""]
    resources: ["pods", "events", "configmaps", "services", "endpoints", "persistentvolumeclaims", "replicationcontrollers"]
    verbs: ["get", "list"]
  - apiGroups: [""]
    resources: ["pods/log"]
    verbs: ["get"]
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["get", "list"]
  - apiGroups: ["apps"]
    resources: ["deployments", "replicasets", "statefulsets", "daemonsets", "controllerrevisions"]
    verbs: ["get", "list"]
  - apiGroups: ["batch"]
    resources: ["jobs", "cronjobs"]
    verbs: ["get", "list"]
  - apiGroups: ["autoscaling"]
    resources: ["horizontalpodautoscalers"]
    verbs: ["get", "list"]
  - apiGroups: ["policy"]
    resources: ["poddisruptionbudgets"]
    verbs: ["get", "list"]
  - apiGroups: ["networking.k8s.io"]
    resources: ["ingresses", "networkpolicies"]
    verbs: ["get", "list"]
{{- end }}
{{- end }}

{{- /* Secrets are only ever read by name, and only in namespaces a Role names. */}}
{{- define "akritas.secretRule" }}
  - apiGroups: [""]
    resources: ["secrets"]
    verbs: ["get"]
{{- end }}
