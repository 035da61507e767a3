{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "cleave.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "cleave.fullname" -}}
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

{{- define "cleave.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "cleave.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "cleave.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
The label every pod that runs cleave carries, in both shapes: the DaemonSet's pods, and the
Cassandra pods once the sidecar snippet is in their template. Services, monitors and the
NetworkPolicy select on it and on nothing Cassandra-specific.
*/}}
{{- define "cleave.selectorLabels" -}}
cleave.dev/instance: {{ include "cleave.fullname" . }}
{{- end }}

{{- define "cleave.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "cleave.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "cleave.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Where the stream credentials Secret is mounted. */}}
{{- define "cleave.streamSecretDir" -}}/etc/cleave/stream{{- end }}

{{- define "cleave.streamStaging" -}}
{{- $mount := ternary .Values.daemonset.dataMountPath .Values.sidecar.dataMountPath .Values.daemonset.enabled }}
{{- default (printf "%s/cleave-stream-staging" $mount) .Values.stream.staging }}
{{- end }}

{{/*
The cleave container, the same in the DaemonSet and in the sidecar snippet of NOTES.txt.
Its security context meets the `restricted` PodSecurity profile: cleave needs no capability
(FICLONERANGE, copy_file_range, posix_fadvise and FIEMAP work on files the user owns) and
writes only to the data volume and /tmp.
No readiness probe: in the sidecar shape a failing one would take the Cassandra pod out of
its Services (CQL clients, seeds). Liveness and startup probes use /healthz, which answers
as soon as the process serves, never depending on the apiserver: a slow apiserver must not
restart every storage node's sidecar.
*/}}
{{- define "cleave.container" -}}
{{- $root := .root }}
{{- $v := $root.Values }}
{{- $daemon := $v.daemonset.enabled }}
{{- $mount := ternary $v.daemonset.dataMountPath $v.sidecar.dataMountPath $daemon }}
{{- $volume := ternary "cassandra-data" $v.sidecar.dataVolume $daemon }}
{{- $uid := ternary $v.daemonset.runAsUser $v.sidecar.runAsUser $daemon }}
{{- $gid := ternary $v.daemonset.runAsGroup $v.sidecar.runAsGroup $daemon }}
{{- $nodeField := ternary $v.daemonset.nodeNameFieldPath $v.sidecar.nodeNameFieldPath $daemon -}}
- name: cleave
  image: {{ include "cleave.image" $root }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - run
    - --node=$(NODE_NAME)
    {{- if not $v.rbac.clusterWide }}
    - --namespace=$(POD_NAMESPACE)
    {{- end }}
    - --data-dir={{ $v.config.dataDir }}
    - --metrics-addr=0.0.0.0:{{ $v.config.metricsPort }}
    - --log-format={{ $v.config.logFormat }}
    - --log-filter={{ $v.config.logFilter }}
    - --max-concurrent-jobs={{ $v.config.maxConcurrentJobs }}
    - --min-free-percent={{ $v.config.minFreePercent }}
    - --survey-interval-seconds={{ $v.config.surveyIntervalSeconds }}
    - --cassandra-version={{ $v.config.cassandraVersion }}
    {{- if $v.config.managementApi }}
    - --management-api={{ $v.config.managementApi }}
    - --management-api-start-seconds={{ $v.config.managementApiStartSeconds }}
    {{- end }}
    {{- if $v.stream.enabled }}
    - --stream-addr=0.0.0.0:{{ $v.stream.port }}
    - --stream-staging={{ include "cleave.streamStaging" $root }}
    - --stream-max-transfers={{ $v.stream.maxTransfers }}
    - --stream-service-port={{ $v.stream.port }}
    {{- if $v.stream.secretName }}
    {{- if $v.stream.token }}
    - --stream-token-file={{ include "cleave.streamSecretDir" $root }}/token
    {{- end }}
    {{- if $v.stream.tls }}
    - --stream-tls-cert={{ include "cleave.streamSecretDir" $root }}/tls.crt
    - --stream-tls-key={{ include "cleave.streamSecretDir" $root }}/tls.key
    - --stream-tls-client-ca={{ include "cleave.streamSecretDir" $root }}/ca.crt
    {{- end }}
    {{- end }}
    {{- if $v.stream.insecurePlaintext }}
    - --insecure-plaintext
    {{- end }}
    {{- if $v.stream.importCommand }}
    - --stream-import-command={{ $v.stream.importCommand }}
    {{- end }}
    {{- if $v.stream.allowTables }}
    - --stream-allow-tables={{ join "," $v.stream.allowTables }}
    {{- end }}
    {{- end }}
    {{- range $v.config.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: {{ $nodeField }}
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    {{- /* Also what `cleave run --namespace` defaults to: absent when cluster-wide. */}}
    {{- if not $v.rbac.clusterWide }}
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- end }}
  ports:
    - name: cleave-metrics
      containerPort: {{ $v.config.metricsPort }}
      protocol: TCP
    {{- if $v.stream.enabled }}
    - name: cleave-stream
      containerPort: {{ $v.stream.port }}
      protocol: TCP
    {{- end }}
  startupProbe:
    httpGet:
      path: /healthz
      port: cleave-metrics
    periodSeconds: 2
    failureThreshold: 30
  livenessProbe:
    httpGet:
      path: /healthz
      port: cleave-metrics
    periodSeconds: 10
    timeoutSeconds: 5
    failureThreshold: 6
  {{- if and $daemon (eq .shape "daemonset") }}
  # The DaemonSet's pods are cleave alone: readiness on /readyz (both CRDs listed) paces a
  # rolling update. The sidecar has none (see above).
  readinessProbe:
    httpGet:
      path: /readyz
      port: cleave-metrics
    periodSeconds: 10
    failureThreshold: 3
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  {{- if and (eq .shape "daemonset") $v.daemonset.processCapabilities }}
  # daemonset.processCapabilities: Replace must read the open files of Cassandra's process.
  # Listing another UID's /proc/<pid>/fd needs CAP_DAC_READ_SEARCH, reading its links
  # CAP_SYS_PTRACE (measured: neither alone is enough; docs/split.md "The Replace guard").
  # A non-root container does not get added capabilities in its effective set, so this
  # container runs as UID 0 with only these (DAC_OVERRIDE to write into Cassandra's 0700
  # table directories as another UID); its group stays Cassandra's.
  securityContext:
    runAsNonRoot: false
    runAsUser: 0
    runAsGroup: {{ $gid }}
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
      add: ["DAC_READ_SEARCH", "SYS_PTRACE", "DAC_OVERRIDE"]
  {{- else }}
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ $uid }}
    runAsGroup: {{ $gid }}
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  {{- end }}
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: {{ $volume }}
      mountPath: {{ $mount }}
    - name: cleave-tmp
      mountPath: /tmp
    {{- if and $v.stream.enabled $v.stream.secretName }}
    - name: cleave-stream-credentials
      mountPath: {{ include "cleave.streamSecretDir" $root }}
      readOnly: true
    {{- end }}
{{- end }}

{{/*
The init container of the sidecar shape: `cleave apply-pending` publishes the intents of
`publish: OnRestart` jobs before Cassandra starts, as Medusa's restore writes its files
before Cassandra starts. Same image, user and data mount as the cleave container; it needs
no capability (every process it could see in the pod's PID namespace at this point is the
pause process or another init container, which the guard ignores: they cannot hold the
data volume's files). Without shareProcessNamespace (K8ssandraCluster cannot set it) it is
the first and only process of its own PID namespace, which the guard accepts as the init
container's proof (the kubelet starts no app container before the init containers have
completed), with a write lease on every data file, granted to the files' owner (UID 999)
only if no process of the node has it open. So: `args` only, never a `command` wrapper
(cleave must be the entrypoint, PID 1), and the Cassandra UID.
*/}}
{{- define "cleave.applyPendingInit" -}}
{{- $v := .Values -}}
- name: cleave-apply-pending
  image: {{ include "cleave.image" . }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - apply-pending
    - --data-dir={{ $v.config.dataDir }}
    - --json
    - --never-block-start
  resources:
    limits:
      memory: 256Mi
    requests:
      cpu: 50m
      memory: 32Mi
  securityContext:
    runAsNonRoot: true
    runAsUser: {{ $v.sidecar.runAsUser }}
    runAsGroup: {{ $v.sidecar.runAsGroup }}
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: {{ $v.sidecar.dataVolume }}
      mountPath: {{ $v.sidecar.dataMountPath }}
{{- end }}

{{/* The volumes the container needs besides the data volume. */}}
{{- define "cleave.volumes" -}}
- name: cleave-tmp
  emptyDir:
    sizeLimit: 256Mi
{{- if and .Values.stream.enabled .Values.stream.secretName }}
- name: cleave-stream-credentials
  secret:
    secretName: {{ .Values.stream.secretName }}
    defaultMode: 0444
{{- end }}
{{- end }}

{{/* Fails rendering for combinations that would install something broken. */}}
{{- define "cleave.validate" -}}
{{- if and .Values.stream.enabled (not .Values.stream.secretName) (not .Values.stream.insecurePlaintext) }}
{{- fail "stream.enabled needs stream.secretName (a token and/or TLS files), or stream.insecurePlaintext=true on a trusted network" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled (not .Values.daemonset.enabled) (not .Values.networkPolicy.cassandraPodsHavePolicy) }}
{{- fail "networkPolicy.enabled in the sidecar shape selects the Cassandra pods and would isolate them: allow their ports in your own NetworkPolicy first, then set networkPolicy.cassandraPodsHavePolicy=true (docs/install.md)" }}
{{- end }}
{{- if and .Values.cluster.enabled .Values.daemonset.enabled }}
{{- fail "cluster.enabled needs the sidecar shape: a DatacenterCleanup's CleanupJobs name Cassandra pods (spec.nodeName: <pod name>), and the DaemonSet's cleave executes the jobs of a Kubernetes node; set daemonset.enabled=false or cluster.enabled=false" }}
{{- end }}
{{- if and .Values.stream.enabled .Values.stream.secretName }}
{{- if not (or .Values.stream.token .Values.stream.tls) }}
{{- fail "stream.secretName with stream.token=false and stream.tls=false: the receiver never accepts unauthenticated transfers; turn on stream.token (key `token`) and/or stream.tls (keys tls.crt, tls.key, ca.crt)" }}
{{- end }}
{{- if and (not .Values.stream.tls) (not .Values.stream.insecurePlaintext) }}
{{- fail "stream.tls=false sends the token in plaintext: set stream.insecurePlaintext=true (a trusted network only), or put tls.crt, tls.key and ca.crt in the Secret and keep stream.tls=true" }}
{{- end }}
{{- /*
The Secret must hold the keys the flags name, or the cleave container crash-loops and takes
the Cassandra pod out of Ready. Checked against the cluster at install/upgrade; `helm
template` and client dry runs cannot see the cluster (lookup returns nothing, as it does
for kube-system), so there it is not checked.
*/}}
{{- if lookup "v1" "Namespace" "" "kube-system" }}
{{- $secret := lookup "v1" "Secret" .Release.Namespace .Values.stream.secretName }}
{{- if not $secret }}
{{- fail (printf "stream.secretName: Secret %s/%s does not exist: create it first (docs/install.md, 'The RangeStream receiver'); pods mounting a missing Secret never start" .Release.Namespace .Values.stream.secretName) }}
{{- end }}
{{- $need := list }}
{{- if .Values.stream.token }}{{ $need = append $need "token" }}{{ end }}
{{- if .Values.stream.tls }}{{ $need = concat $need (list "tls.crt" "tls.key" "ca.crt") }}{{ end }}
{{- $data := $secret.data | default dict }}
{{- range $need }}
{{- if not (hasKey $data .) }}
{{- fail (printf "Secret %s/%s has no key %q: stream.token=true needs `token`, stream.tls=true needs tls.crt, tls.key and ca.crt (a token-only Secret: --set stream.tls=false,stream.insecurePlaintext=true)" $.Release.Namespace $.Values.stream.secretName .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "image.repository is not set: build the image (scripts/build-image.sh), push it to a registry your nodes can pull from (skopeo copy oci-archive:target/image/cleave.oci.tar:<version> docker://<registry>/cleave:<version>), then install with --set image.repository=<registry>/cleave (docs/install.md). There is no public image: a sidecar that cannot be pulled makes every Cassandra pod NotReady." }}
{{- end }}
{{- end }}

{{/*
The sidecar for a cass-operator CassandraDatacenter: merge under its `spec`. cass-operator
builds the `cassandra` container and the `server-data` volume (the PVC mounted at
/var/lib/cassandra) itself and appends our container after it; cleave mounts the same volume
at the same path, so paths in job status are the ones Cassandra uses.
shareProcessNamespace: cleave must see Cassandra's process to refuse a Replace next to a live
Cassandra; as the same UID it can read that process's open files without any capability.
*/}}
{{- define "cleave.sidecarSnippet" -}}
spec:
  serviceAccountName: {{ include "cleave.serviceAccountName" . }}
  podTemplateSpec:
    metadata:
      labels:
        {{- include "cleave.selectorLabels" . | nindent 8 }}
      annotations:
        # cass-operator puts its cassandra container after ours: without this, kubectl
        # exec/logs without -c would land in the distroless cleave container.
        kubectl.kubernetes.io/default-container: cassandra
    spec:
      {{- if .Values.sidecar.shareProcessNamespace }}
      shareProcessNamespace: true
      {{- end }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
      {{- if .Values.sidecar.applyPending }}
      initContainers:
        {{- include "cleave.applyPendingInit" . | nindent 8 }}
      {{- end }}
      containers:
        {{- include "cleave.container" (dict "root" . "shape" "sidecar") | nindent 8 }}
      volumes:
        {{- include "cleave.volumes" . | nindent 8 }}
{{- end }}

{{/*
The cluster part (`cleave run --cluster`, templates/cluster.yaml). Its pods carry none of
cleave.selectorLabels: the metrics Service, the monitors and the NetworkPolicy are the node
sidecars', and a standby replica answers cleave_ready 0 for as long as it stands by (alert
CleaveNotReady). The Deployment selects on the component label, which no Cassandra pod and no
DaemonSet pod carries.
*/}}
{{- define "cleave.clusterName" -}}
{{- printf "%s-cluster" (include "cleave.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "cleave.clusterSelectorLabels" -}}
app.kubernetes.io/name: {{ include "cleave.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: cluster
{{- end }}

{{- define "cleave.clusterLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "cleave.clusterSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "cleave.clusterServiceAccountName" -}}
{{- if .Values.cluster.serviceAccount.create }}
{{- default (include "cleave.clusterName" .) .Values.cluster.serviceAccount.name }}
{{- else }}
{{- required "cluster.serviceAccount.name is required when cluster.serviceAccount.create=false" .Values.cluster.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The Lease the replicas elect their leader with (`--leader-lease`), the one name the Role's
resourceNames grant. One name for every release: two releases watching one namespace must
not both lead there.
*/}}
{{- define "cleave.leaderLease" -}}cleave-cluster-leader{{- end }}

{{/*
Where that Lease lives: `cleave run --cluster` keeps it in --namespace, and without
--namespace (rbac.clusterWide: every namespace watched) in `default`.
*/}}
{{- define "cleave.leaderNamespace" -}}
{{- ternary "default" .Release.Namespace .Values.rbac.clusterWide }}
{{- end }}
