{{/* Full name of the release's objects, at most 63 characters. */}}
{{- define "ttsfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ttsfleet.selectorLabels" -}}
app.kubernetes.io/name: ttsfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ttsfleet.labels" -}}
{{ include "ttsfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ttsfleet
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The leader-election Lease, in the release namespace. */}}
{{- define "ttsfleet.leaseName" -}}
{{- printf "%s-operator" (include "ttsfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ttsfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ttsfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The operator's permissions: exactly the requests it makes.
- ttsservices: kopf lists and watches them and writes nothing onto them (no diff-base,
  progress or finalizer: handlers.py); the reconciler patches status.
- children: listed to compare, created and patched by server-side apply
  (apply of a new object needs create), deleted when no longer rendered.
- deployments are also watched: a TTSService's status follows its Deployments'
  status as it changes, not at the next resync.
- events: the reconciler creates one per change or failure.
No get (the operator only lists), no scale (the HPA controller has its own),
no CRD or namespace watching (kopf's scanning is off), no peering (standalone; leader
election uses a Lease, granted apart in leader-election.yaml).
*/}}
{{- define "ttsfleet.rules" -}}
- apiGroups: ["ttsfleet.io"]
  resources: ["ttsservices"]
  verbs: ["list", "watch"]
- apiGroups: ["ttsfleet.io"]
  resources: ["ttsservices/status"]
  verbs: ["patch"]
# Every child kind but the optional HTTPRoute is watched: the operator's passes read them
# from the cache the watches keep (child_cache.py), and a deleted child comes back at once.
- apiGroups: [""]
  resources: ["configmaps", "services"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# The model cache: its claim and the Job that fills it, watched for the cache's phase.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# model.cache.prewarm: reads the cache into each GPU node's page cache.
- apiGroups: ["apps"]
  resources: ["daemonsets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["autoscaling"]
  resources: ["horizontalpodautoscalers"]
  verbs: ["list", "watch", "create", "patch", "delete"]
- apiGroups: ["gateway.networking.k8s.io"]
  resources: ["httproutes"]
  verbs: ["list", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# The API keys Secret a TTSService without one gets: created once (409 means it exists).
# Never get, list or watch: RBAC cannot limit those to metadata, so they would read every
# Secret in scope. Never patched or deleted either (garbage collection does that).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["create"]
{{- end -}}
