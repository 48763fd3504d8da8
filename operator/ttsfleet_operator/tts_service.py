"""The TTSService resource (ttsfleet.io/v1alpha1): the one source of truth.

The CRD's OpenAPI schema is generated from these models (`crd.py`), CEL rules
included, so the API server and `ttsfleet render` accept and refuse the same
specs. Field names on the wire are camelCase; Python uses snake_case.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ttsfleet_operator import cel, gpu_classes, grammar
from ttsfleet_operator.grammar import (
    DNS1035_LABEL,
    ByteQuantity,
    DnsLabel,
    DnsSubdomain,
    EnvName,
    HubRepoId,
    HubRevision,
    ImageReference,
    LabelKey,
    LabelValue,
    SecretKey,
    VolumePath,
)
from ttsfleet_runtime.settings import SETTINGS as RUNTIME_SETTINGS

GROUP = "ttsfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TTSService"
PLURAL = "ttsservices"
SINGULAR = "ttsservice"
SHORT_NAMES = ["tts"]

DEFAULT_RUNTIME_IMAGE = "ghcr.io/ttsfleet/runtime:0.1.0"

# Bounds that keep CEL cost estimates inside the API server's budget and stop
# absurd objects at the door.
LIST_MAX = 16

Size = Literal["0.6B", "1.7B"]
Variant = Literal["Base", "CustomVoice", "VoiceDesign"]
# The GPU table is the one list of classes; the schema's enum comes from it.
GpuClassName = Literal[tuple(gpu_classes.GPU_CLASSES)]


def section(model: type[BaseModel], description: str) -> Any:
    """A nested object that exists even when omitted, with all its defaults.

    The CRD's `default` is the fully defaulted object (not `{}`): the API server
    checks a default against the object's CEL rules as it stands, before nested
    defaults would fill it in.
    """

    def schema_default(schema: dict[str, Any]) -> None:
        schema["default"] = model().wire()

    return Field(default_factory=model, description=description, json_schema_extra=schema_default)


def _schema_with_cel_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    rules = model.__dict__.get("cel_rules")
    if rules:
        schema[cel.VALIDATIONS_KEY] = rules


class SpecModel(BaseModel):
    """Base of every part of the resource: camelCase on the wire, CEL rules checked."""

    # strict: `replicas: "3"` or `cudaGraphs: "yes"` is refused, as the API server refuses it.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        strict=True,
        json_schema_extra=_schema_with_cel_rules,
    )
    # Each subclass lists its own rules; they apply to objects of that class.
    cel_rules: ClassVar[list[dict]] = []

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # The API server prunes a null field (none is nullable) before defaulting:
        # `replicas: null` means "not given" there, so it does here.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @model_validator(mode="after")
    def _check_cel_rules(self) -> SpecModel:
        rules = type(self).__dict__.get("cel_rules")
        if rules:
            failed = cel.failed_messages(rules, self.cel_self())
            if failed:
                raise ValueError("; ".join(failed))
        return self

    def wire(self) -> dict[str, Any]:
        """The JSON the API server stores: camelCase, defaults filled, unset optionals absent."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def cel_self(self) -> dict[str, Any]:
        """What this model's rules see as `self`: its JSON as the API server stores it."""
        return self.wire()


class PvcSource(SpecModel):
    """A checkpoint already on a PersistentVolumeClaim (offline clusters)."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "!(self.path.contains('/../') || self.path.endsWith('/..'))",
            "model.source.pvc.path must not contain '..': it names a directory inside the volume",
            field_path=".path",
        ),
    ]
    claim_name: DnsSubdomain = Field(description="PVC in the TTSService's namespace.")
    path: VolumePath = Field(
        default="/",
        description="Checkpoint directory inside the volume (config.json + safetensors).",
    )


class ModelSource(SpecModel):
    """Where the checkpoint comes from: a hub repository or a PVC, never both."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule("has(self.hub) != has(self.pvc)", "model.source needs exactly one of hub or pvc"),
    ]
    hub: HubRepoId | None = Field(
        default=None,
        description="Hub repository id (owner/name), e.g. Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice.",
    )
    pvc: PvcSource | None = None


class SecretKeyRef(SpecModel):
    """One key of a Secret in the TTSService's namespace."""

    name: DnsSubdomain
    key: SecretKey


class ModelCacheSpec(SpecModel):
    """A volume the operator fills once with the checkpoint, which every pod mounts read-only.

    The cache is named after what it holds (hub repository, revision) and where (size,
    storage class, access mode): changing any of them fills a new cache, and the pods
    move to it only once it is Ready; the old one is deleted then.
    """

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.prewarm != 'PageCache' || self.accessMode == 'ReadWriteMany'",
            "model.cache.prewarm PageCache mounts the cache on every node of the GPU class: it needs"
            " accessMode ReadWriteMany",
            field_path=".prewarm",
        ),
    ]

    enabled: bool = Field(
        default=False,
        description="Fill a PersistentVolumeClaim from the hub once (a Job) and mount it in every pod;"
        " pods never download, and are not started before the cache is Ready.",
    )
    size: ByteQuantity = Field(
        default="20Gi",
        description="Requested size of the PersistentVolumeClaim (a checkpoint is 2-5 GB).",
    )
    storage_class_name: DnsSubdomain | None = Field(
        default=None, description="StorageClass of the claim; unset: the cluster's default class."
    )
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce"] = Field(
        default="ReadWriteMany",
        description="ReadWriteMany (NFS, EFS, Filestore, Azure Files) serves pods on any node;"
        " ReadWriteOnce volumes attach to one node at a time, so only a fleet on one node can share one.",
    )
    hub_token_secret: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a hub token (gated or private repositories); only the fill Job"
        " reads it.",
    )
    prewarm: Literal["None", "PageCache"] = Field(
        default="None",
        description="PageCache: a DaemonSet reads the checkpoint on every node of the GPU class, so pods"
        " starting there load it from memory (ReadWriteMany only).",
    )


class ModelSpec(SpecModel):
    """Which Qwen3-TTS checkpoint the pods serve."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.variant != 'VoiceDesign' || self.size == '1.7B'",
            "VoiceDesign is only released at size 1.7B",
            field_path=".variant",
        ),
        cel.rule(
            "self.tokenizerRateHz == 12 || has(self.source)",
            "no 25 Hz Qwen3-TTS checkpoint is published: set model.source to your own 25 Hz checkpoint",
            field_path=".tokenizerRateHz",
        ),
        cel.rule(
            "!has(self.revision) || !has(self.source) || has(self.source.hub)",
            "model.revision pins a hub checkpoint; a PVC source has no revision",
            field_path=".revision",
        ),
        cel.rule(
            "!self.cache.enabled || !has(self.source) || has(self.source.hub)",
            "model.cache is filled from the hub; a PVC source is a volume already",
            field_path=".cache.enabled",
        ),
    ]
    size: Size = Field(description="Parameter count of the talker.")
    variant: Variant = Field(
        description="Base (voice cloning), CustomVoice (built-in speakers) or VoiceDesign (voices from a description)."
    )
    tokenizer_rate_hz: Literal[12, 25] = Field(
        default=12,
        description=(
            "Speech tokenizer of the checkpoint: 12 (12.5 frames a second, 16 codes each, "
            "lowest latency) or 25 (25 one-code frames a second, a DiT decoder: first audio "
            "after 24 frames). No 25 Hz Qwen3-TTS checkpoint is published, so 25 needs a "
            "custom source. Pods refuse a checkpoint of the other rate."
        ),
    )
    source: ModelSource | None = Field(
        default=None,
        description="Defaults to the official hub repository for size, variant and rate.",
    )
    revision: HubRevision | None = Field(
        default=None, description="Hub revision (commit, tag or branch) to pin."
    )
    cache: ModelCacheSpec = section(
        ModelCacheSpec, "A checkpoint volume filled once by the operator."
    )

    def hub_id(self) -> str | None:
        """The hub repository served, or None for a PVC source."""
        if self.source is None:
            return f"Qwen/Qwen3-TTS-{self.tokenizer_rate_hz}Hz-{self.size}-{self.variant}"
        return self.source.hub


class GpuSpec(SpecModel):
    """The accelerator each pod gets."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.count == 1",
            "gpu.count must be 1: the runtime serves with one GPU, so a pod given more would hold"
            " GPUs it never uses (multi-GPU serving does not exist yet)",
            field_path=".count",
        ),
        cel.rule(
            f"self.class != '{gpu_classes.CPU_CLASS}' || !has(self.product)",
            f"gpu.product names a GPU; class {gpu_classes.CPU_CLASS} has none",
            field_path=".product",
        ),
    ]
    gpu_class: GpuClassName = Field(
        default="h100",
        alias="class",
        description=f"GPU class (see the GPU table); {gpu_classes.CPU_CLASS}: no GPU, the pods"
        f" serve on the CPU of nodes labelled and tainted {gpu_classes.CPU_SERVING_KEY} (development"
        " and CI clusters).",
    )
    count: int = Field(
        default=1, ge=1, le=8, description="GPUs per pod; 1 until the runtime serves with several."
    )
    product: LabelValue | None = Field(
        default=None,
        description="Override of the nvidia.com/gpu.product node label value for this class.",
    )


class AutoscalingSpec(SpecModel):
    """An HPA on the TTSService's /scale: queue depth and GPU utilisation."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.minReplicas <= self.maxReplicas",
            "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
            field_path=".minReplicas",
        ),
    ]
    enabled: bool = Field(
        default=False, description="Create an HPA that writes spec.replicas through /scale."
    )
    min_replicas: int = Field(default=1, ge=1, le=1000, description="Fewest pods the HPA keeps.")
    max_replicas: int = Field(default=4, ge=1, le=1000, description="Most pods the HPA asks for.")
    target_gpu_utilization: int = Field(
        default=80,
        ge=1,
        le=100,
        alias="targetGPUUtilization",
        description="Average GPU utilisation, percent.",
    )
    target_queue_depth: int = Field(
        default=4, ge=1, le=10000, description="Average requests waiting for a batch slot per pod."
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="Look-back window before removing pods (GPU pods load slowly).",
    )


class Toleration(SpecModel):
    """A pod toleration, with the rules Kubernetes applies to one (so a Deployment is never refused)."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "has(self.key) || self.operator == 'Exists'",
            "a toleration without a key needs operator Exists",
        ),
        cel.rule(
            "self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "a toleration with operator Exists has no value",
            field_path=".value",
        ),
        cel.rule(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "tolerationSeconds applies to effect NoExecute only",
            field_path=".tolerationSeconds",
        ),
    ]
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0, le=86400 * 365)


class SpotSpec(SpecModel):
    """How much of the fleet runs on spot (preemptible) capacity."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.ratio >= 0.0 && self.ratio <= 1.0",
            "spot.ratio is a fraction between 0 and 1",
            field_path=".ratio",
        ),
        cel.rule(
            f"!has(self.nodeSelector) || self.nodeSelector.all(key, key.matches(r'{grammar.LABEL_KEY}'))",
            "spot.nodeSelector keys are label keys: an optional DNS prefix and '/', then a name of letters,"
            " digits, '-', '_' and '.'",
            field_path=".nodeSelector",
        ),
    ]
    ratio: float = Field(
        default=0.0, ge=0.0, le=1.0, description="Share of replicas on spot nodes, 0..1."
    )
    min_on_demand: int = Field(
        default=1, ge=0, le=1000, description="Replicas kept on on-demand nodes whatever the ratio."
    )
    node_selector: dict[str, LabelValue] | None = Field(
        default=None,
        max_length=LIST_MAX,
        description="Labels of spot nodes; replaces the defaults (Karpenter, GKE, AKS spot labels).",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        max_length=LIST_MAX,
        description="Tolerations of spot pods; replaces the defaults.",
    )


class CanaryCandidate(SpecModel):
    """What the canary track runs instead of the stable one."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "has(self.image) || has(self.modelRevision)",
            "canary.candidate needs an image or a modelRevision",
        ),
    ]
    image: ImageReference | None = Field(
        default=None,
        description="Runtime image of the candidate: [host[:port]/]path[:tag][@digest].",
    )
    model_revision: HubRevision | None = Field(
        default=None, description="Hub revision the candidate serves."
    )


class CanaryAnalysis(SpecModel):
    """When a candidate is promoted or rolled back (Prometheus, per interval)."""

    interval_seconds: int = Field(default=60, ge=10, le=3600)
    steps: int = Field(default=4, ge=1, le=20, description="Weight increments from percent to 100.")
    ttfa_p95_milliseconds: int = Field(
        default=500,
        ge=1,
        le=60000,
        alias="ttfaP95Milliseconds",
        description="Highest p95 time to first audio.",
    )
    max_error_ratio: float = Field(
        default=0.01, ge=0.0, le=1.0, description="Highest share of failed requests."
    )
    min_requests: int = Field(
        default=50, ge=0, le=1000000, description="Requests needed before an interval counts."
    )
    failure_limit: int = Field(
        default=2, ge=0, le=100, description="Failed intervals tolerated before rollback."
    )
    inconclusive_limit: int = Field(
        default=5,
        ge=1,
        le=100,
        description="Consecutive intervals with fewer than minRequests before the rollout pauses (weight held).",
    )


class GatewayRef(SpecModel):
    """The Gateway (or mesh parent) the canary's HTTPRoute attaches to."""

    name: DnsSubdomain
    namespace: DnsLabel | None = None
    section_name: DnsSubdomain | None = None


class CanarySpec(SpecModel):
    """A candidate next to stable, given `percent` of traffic and analysed."""

    percent: int = Field(
        default=10, ge=0, le=100, description="Candidate's starting traffic weight, percent."
    )
    candidate: CanaryCandidate
    analysis: CanaryAnalysis = section(CanaryAnalysis, "Promotion and rollback rules.")
    traffic: Literal["Auto", "Replicas", "GatewayAPI"] = Field(
        default="Auto",
        description="How traffic is split: Auto uses an HTTPRoute when the cluster serves Gateway API, else the"
        " replica ratio behind the one Service.",
    )
    gateway: GatewayRef | None = Field(
        default=None,
        description="Parent of the HTTPRoute; unset attaches it to the TTSService's Service (GAMMA mesh routing).",
    )


class EngineSpec(SpecModel):
    """Engine settings each runtime pod reads from its ConfigMap; defaults and bounds are
    the runtime's own (its settings catalogue), so a pod and a bare `serve` agree."""

    max_batch: int = Field(
        **RUNTIME_SETTINGS["max_batch"].field_args(), description="Streams decoded together."
    )
    max_len: int = Field(
        **RUNTIME_SETTINGS["max_len"].field_args(),
        description=(
            "KV positions one stream may use: its prompt and its frames, 12.5 a second at "
            "12 Hz and 25 at 25 Hz (the default holds ~6 or ~3 minutes)."
        ),
    )
    kv_cache_memory: float = Field(
        **RUNTIME_SETTINGS["kv_cache_memory"].field_args(),
        description="Share of the GPU memory free after the weights that the KV cache takes.",
    )
    max_queue: int = Field(
        **RUNTIME_SETTINGS["max_queue"].field_args(), description="Requests waiting before 429s."
    )
    max_audio_seconds: float = Field(
        **RUNTIME_SETTINGS["max_audio_seconds"].field_args(),
        description="Longest utterance one request may generate; longer ones end there.",
    )
    cuda_graphs: bool = Field(
        **RUNTIME_SETTINGS["cuda_graphs"].field_args(),
        description="Capture decode steps as CUDA graphs.",
    )
    first_chunk_frames: int = Field(
        **RUNTIME_SETTINGS["first_chunk_frames"].field_args(),
        description=(
            "Codec frames in the first audio chunk; a 25 Hz checkpoint rounds chunks up to "
            "whole DiT blocks (12 frames)."
        ),
    )
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        default="bfloat16", description="Weight and activation type."
    )
    weights: Literal["bf16", "fp8"] = Field(
        default=RUNTIME_SETTINGS["weights"].default,
        description=(
            "Weights of the talker's and the code predictor's decoder layers: bf16 as the "
            "checkpoint, or fp8 (e4m3, per-channel scales, quantized at load): about half the "
            "bytes a decode step reads, on GPUs of compute capability 8.9+ (L4, L40S, H100, "
            "H200). Embeddings, heads, norms and the codec stay in dtype."
        ),
    )


class RuntimeResources(SpecModel):
    """CPU and memory of each runtime container (the GPU comes from spec.gpu)."""

    cpu: str = Field(default="4", max_length=32, pattern=r"^[0-9]+(\.[0-9]+)?m?$")
    memory: ByteQuantity = "32Gi"
    cache_size: ByteQuantity = Field(
        default="40Gi",
        description="Size limit of the emptyDir that holds the downloaded checkpoint.",
    )


# Environment a spec may not set, and why (the messages name them; docs/fields.md lists them).
# TTSFLEET_*: the runtime's settings come from the spec through the engine ConfigMap; an
# override would make the spec lie (and a bad one stops the server at start-up).
ENV_SETTINGS_PREFIX = "TTSFLEET_"
# The dynamic loader's and the interpreter's: each loads code of the caller's choosing into
# the server (LD_PRELOAD, LD_AUDIT; PYTHONPATH, PYTHONSTARTUP, PYTHONWARNINGS imports a
# module; glibc's iconv modules and tunables; OpenSSL's config, providers and engines load
# shared objects named there).
ENV_LOADER_PREFIXES = ("LD_", "PYTHON")
ENV_LOADER_NAMES = (
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
)
# The NVIDIA container runtime's: NVIDIA_VISIBLE_DEVICES=all hands the container every GPU
# of the node, past the device plugin's allocation (other pods' GPUs included).
ENV_GPU_RUNTIME_PREFIX = "NVIDIA_"
# Set by the operator from model.source (deployment.py), and the hub caches that would
# override where HF_HOME puts the checkpoint.
ENV_OPERATOR_NAMES = (
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
)


def _cel_list(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


class EnvVar(SpecModel):
    """One extra environment variable of the server."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            f"!self.name.startsWith('{ENV_SETTINGS_PREFIX}')",
            f"runtime.env may not set {ENV_SETTINGS_PREFIX}* variables: the runtime's settings come from the"
            " spec (engine, runtime, model) through the engine ConfigMap",
            field_path=".name",
        ),
        cel.rule(
            " && ".join(f"!self.name.startsWith('{prefix}')" for prefix in ENV_LOADER_PREFIXES)
            + f" && !(self.name in {_cel_list(ENV_LOADER_NAMES)})",
            "runtime.env may not set loader or interpreter variables ("
            + ", ".join([f"{prefix}*" for prefix in ENV_LOADER_PREFIXES] + list(ENV_LOADER_NAMES))
            + "): they load code into the server",
            field_path=".name",
        ),
        cel.rule(
            f"!self.name.startsWith('{ENV_GPU_RUNTIME_PREFIX}')",
            f"runtime.env may not set {ENV_GPU_RUNTIME_PREFIX}* variables: the NVIDIA container runtime reads"
            " them (NVIDIA_VISIBLE_DEVICES=all would expose GPUs the pod was not given)",
            field_path=".name",
        ),
        cel.rule(
            f"!(self.name in {_cel_list(ENV_OPERATOR_NAMES)})",
            f"runtime.env may not set {', '.join(ENV_OPERATOR_NAMES)}: the operator sets them from"
            " model.source (the hub caches would move the checkpoint away from HF_HOME)",
            field_path=".name",
        ),
    ]
    name: EnvName
    value: str = Field(default="", max_length=4096)


class RuntimeSpec(SpecModel):
    """The runtime container: image, resources, auth and lifecycle."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.auth == 'Enabled' || !has(self.apiKeysSecret)",
            "runtime.apiKeysSecret has no effect with runtime.auth Disabled: remove one of them",
            field_path=".apiKeysSecret",
        ),
        cel.rule(
            "!has(self.env) || self.env.all(e, self.env.exists_one(f, f.name == e.name))",
            "runtime.env names must be unique",
            field_path=".env",
        ),
    ]
    image: ImageReference = Field(
        default=DEFAULT_RUNTIME_IMAGE,
        description="Runtime image (stable): [host[:port]/]path[:tag][@digest].",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    image_pull_secrets: list[DnsSubdomain] | None = Field(default=None, max_length=LIST_MAX)
    service_account_name: DnsSubdomain | None = Field(
        default=None,
        description="Pods' ServiceAccount (e.g. for a hub token via workload identity).",
    )
    auth: Literal["Enabled", "Disabled"] = Field(
        default="Enabled",
        description="Enabled: clients send an API key (from apiKeysSecret, else from the Secret `<name>-api-keys`"
        " the operator creates with one random key). Disabled: anyone who reaches the Service may call it.",
    )
    api_keys_secret: DnsSubdomain | None = Field(
        default=None,
        description="Secret whose key `keys` lists the API keys clients must send, one a line; unset: the"
        " operator creates and owns `<name>-api-keys`.",
    )
    resources: RuntimeResources = section(RuntimeResources, "CPU, memory and model cache size.")
    env: list[EnvVar] | None = Field(
        default=None, max_length=64, description="Extra environment of the server."
    )
    startup_timeout_seconds: int | None = Field(
        default=None,
        ge=60,
        le=7200,
        description="Longest model download + load + CUDA graph capture; unset: twice the measured"
        " start-up for the model size and GPU class, plus a download allowance unless model.cache"
        " is on (the operator's start-up table).",
    )
    termination_grace_seconds: int = Field(
        default=120,
        ge=5,
        le=3600,
        description="Time in-flight streams get to finish when a pod stops.",
    )


class RedisVoiceStore(SpecModel):
    """A Redis server every replica reaches (the URL may carry a password: it stays in a Secret)."""

    url_secret: SecretKeyRef = Field(
        description="Secret key holding redis://[:password@]host:port/db or rediss://...; pods read it"
        " from the environment, never from the ConfigMap.",
    )


class VoiceStoreSpec(SpecModel):
    """Where uploaded voices live, shared by every replica."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule("has(self.redis)", "voices.store needs redis (the one shared store so far)"),
    ]
    redis: RedisVoiceStore | None = None


_RETENTION = RUNTIME_SETTINGS["voice_retention_days"]


class VoicesSpec(SpecModel):
    """Uploaded voices (cloning with the Base variant): one store for the whole fleet."""

    # The schema's bounds are 0 to the most; the runtime also refuses what lies between
    # 0 (off) and its least retention, which erases each voice as soon as it is stored.
    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            # double(): a manifest's `30` is an int to CEL, which compares no int to a double.
            f"double(self.retentionDays) == {float(_RETENTION.off)!r} "
            f"|| double(self.retentionDays) >= {_RETENTION.minimum!r}",
            f"voices.retentionDays must be {_RETENTION.off:g} (keep voices until deleted) or "
            f"at least {_RETENTION.minimum:g} (one hour)",
            field_path=".retentionDays",
        ),
    ]
    store: VoiceStoreSpec
    retention_days: float = Field(
        **RUNTIME_SETTINGS["voice_retention_days"].field_args(),
        description="Days an uploaded voice is kept before it is erased everywhere; 0 keeps voices"
        " until deleted.",
    )


class RedisCache(SpecModel):
    """The Redis level of the response cache (it may be the voice store's Redis: the
    cache's keys are its own and all expire)."""

    url_secret: SecretKeyRef = Field(
        description="Secret key holding redis://[:password@]host:port/db or rediss://...; pods read it"
        " from the environment, never from the ConfigMap.",
    )
    ttl_seconds: float = Field(
        **RUNTIME_SETTINGS["response_cache_redis_ttl_s"].field_args(),
        description="Seconds a cached response stays in Redis.",
    )


class S3Cache(SpecModel):
    """The S3-compatible bucket level of the response cache (AWS S3, GCS interop, R2,
    Ceph, SeaweedFS...). Give the bucket a lifecycle rule expiring objects under the
    prefix after ttlDays: the runtime never serves an older entry, the rule reclaims them."""

    endpoint: str = Field(
        min_length=1,
        max_length=2048,
        pattern=r"^https?://",
        description="Endpoint URL, e.g. https://s3.eu-west-1.amazonaws.com (path-style requests).",
    )
    bucket: str = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")
    prefix: str = Field(
        default=RUNTIME_SETTINGS["response_cache_s3_prefix"].default,
        min_length=1,
        max_length=256,
        description="Key prefix of every cached response in the bucket.",
    )
    region: str = Field(
        default=RUNTIME_SETTINGS["response_cache_s3_region"].default,
        min_length=1,
        max_length=64,
        description="Region the requests are signed for.",
    )
    access_key_secret: SecretKeyRef = Field(description="Secret key holding the access key id.")
    secret_key_secret: SecretKeyRef = Field(description="Secret key holding the secret access key.")
    ttl_days: float = Field(
        **RUNTIME_SETTINGS["response_cache_s3_ttl_days"].field_args(),
        description="Days a cached response is served from the bucket.",
    )


class CacheSpec(SpecModel):
    """The response cache: audio of reproducible requests (a seed, or `cache: true`) made
    once and served again from the pod's memory, Redis and a bucket, fastest first."""

    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "self.memory != '0' || has(self.redis) || has(self.s3)",
            "cache needs a level: a memory size other than 0, redis or s3",
        ),
    ]
    memory: ByteQuantity = Field(
        default="256Mi",
        description="Memory each pod keeps cached responses in (least recently used out);"
        " counts against runtime.resources.memory. 0: no memory level.",
    )
    max_object_bytes: int = Field(
        **RUNTIME_SETTINGS["response_cache_max_object_bytes"].field_args(),
        description="Largest response the cache keeps (longer audio is served, not cached).",
    )
    redis: RedisCache | None = None
    s3: S3Cache | None = None


# --- batch synthesis jobs (issue 33 part 2; docs/batch.md) ---
class BatchSpec(SpecModel):
    """Batch synthesis jobs: OpenAI's /v1/files + /v1/batches on every pod, their state in
    spec.cache's Redis and their files and audio in its bucket, and workers on the pods of
    the pools named, on the batch slots interactive traffic leaves."""

    pools: Literal["spot", "on-demand", "both"] = Field(
        default="both",
        description="Whose pods run batch workers: spot (cheapest; preemption hands leases back),"
        " on-demand, or both. Every pod serves the API.",
    )
    concurrency: int = Field(
        default=32,
        ge=1,
        le=RUNTIME_SETTINGS["batch_worker_concurrency"].maximum,
        description="Batch items one worker pod synthesises at once (the engine gives them at most"
        " three quarters of its batch slots, after interactive requests).",
    )
    lease_seconds: float = Field(
        **RUNTIME_SETTINGS["batch_lease_s"].field_args(),
        description="How long a worker's claim on an item lasts unless renewed; a pod lost without"
        " notice holds its items this long.",
    )


# --- end of batch synthesis jobs ---


class TTSServiceSpec(SpecModel):
    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            "!self.autoscaling.enabled || self.spot.minOnDemand <= self.autoscaling.maxReplicas",
            "spot.minOnDemand must not exceed autoscaling.maxReplicas",
            field_path=".spot.minOnDemand",
        ),
        cel.rule(
            "!has(self.canary)"
            " || (has(self.canary.candidate.image) && self.canary.candidate.image != self.runtime.image)"
            " || (has(self.canary.candidate.modelRevision) && (!has(self.model.revision)"
            " || self.canary.candidate.modelRevision != self.model.revision))",
            "canary.candidate must differ from stable: a different image or model revision",
            field_path=".canary.candidate",
        ),
        cel.rule(
            "!has(self.canary) || !has(self.canary.candidate.modelRevision) || !has(self.model.source)"
            " || has(self.model.source.hub)",
            "a canary modelRevision needs a hub model source",
            field_path=".canary.candidate.modelRevision",
        ),
        cel.rule(
            "!has(self.canary) || !has(self.canary.candidate.modelRevision) || !self.model.cache.enabled",
            "a canary modelRevision is not served from model.cache yet: change model.revision (a new"
            " cache is filled, then the pods move to it) or canary the image only",
            field_path=".canary.candidate.modelRevision",
        ),
        cel.rule(
            "!has(self.batch) || (has(self.cache) && has(self.cache.redis) && has(self.cache.s3))",
            "batch needs cache.redis and cache.s3: batches keep their state in that Redis and their"
            " files and audio in that bucket",
            field_path=".batch",
        ),
        cel.rule(
            "!has(self.voices) || self.model.variant == 'Base'",
            "voices are cloned by the Base variant only: the runtime refuses uploaded voices on"
            " CustomVoice and VoiceDesign",
            field_path=".voices",
        ),
    ]
    model: ModelSpec
    gpu: GpuSpec = section(GpuSpec, "GPU class and count per pod.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Pods in total (all pools, all tracks); the HPA writes it via /scale.",
    )
    autoscaling: AutoscalingSpec = section(AutoscalingSpec, "Horizontal autoscaling.")
    spot: SpotSpec = section(SpotSpec, "Spot and on-demand pools.")
    canary: CanarySpec | None = Field(
        default=None, description="A candidate rollout; absent means no canary."
    )
    engine: EngineSpec = section(EngineSpec, "Engine settings.")
    runtime: RuntimeSpec = section(RuntimeSpec, "Runtime container.")
    voices: VoicesSpec | None = Field(
        default=None,
        description="Uploaded voices and where they are stored; absent: no shared voice store.",
    )
    cache: CacheSpec | None = Field(
        default=None,
        description="The response cache (docs/response-cache.md); absent: no cache.",
    )
    batch: BatchSpec | None = Field(
        default=None,
        description="Batch synthesis jobs (docs/batch.md); absent: no batch API, no workers.",
    )


ConditionType = Literal["Ready", "Progressing", "Degraded", "CanaryProgressing"]


class Condition(SpecModel):
    """A standard metav1.Condition."""

    type: str = Field(max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(description="RFC 3339 time the status last changed.")
    observed_generation: int | None = None


class PoolReplicas(SpecModel):
    """Desired replicas per pool."""

    on_demand: int = 0
    spot: int = 0


class AnalysisResult(SpecModel):
    """The last canary analysis: Pass, Fail or Inconclusive, and why."""

    result: Literal["Pass", "Fail", "Inconclusive"]
    reason: str = Field(default="", max_length=1024)
    time: str | None = Field(default=None, description="RFC 3339 time of the analysis.")


class CanaryStatus(SpecModel):
    """Where the rollout of one candidate stands; the operator's memory of it (never in spec)."""

    phase: Literal["Idle", "Progressing", "Paused", "Promoting", "Promoted", "RolledBack"] = "Idle"
    revision: str | None = Field(
        default=None, description="Revision of the candidate this rollout is about."
    )
    step: int = Field(default=0, description="Current step, 1..analysis.steps.")
    weight: int = Field(default=0, description="Candidate's traffic share, percent.")
    failures: int = Field(default=0, description="Failed analysis intervals in this rollout.")
    inconclusive: int = Field(default=0, description="Consecutive inconclusive intervals.")
    step_started: str | None = Field(
        default=None, description="RFC 3339 time the current step or phase began."
    )
    last_analysis: AnalysisResult | None = None
    handled_action: str | None = Field(
        default=None,
        description="`<action>@<revision>` of the last canary-action annotation acted on.",
    )
    message: str = Field(default="", max_length=4096)


ModelCachePhase = Literal["Pending", "Downloading", "Ready", "Failed"]


class ModelCacheStatus(SpecModel):
    """The model cache the spec asks for, and the one the pods mount (they differ while it fills)."""

    claim_name: str = Field(description="PersistentVolumeClaim of the cache the spec asks for.")
    phase: ModelCachePhase
    reason: str = Field(default="", max_length=1024)
    message: str = Field(default="", max_length=4096)
    serving_claim_name: str | None = Field(
        default=None, description="PersistentVolumeClaim the pods mount; unset: none is Ready yet."
    )


class TTSServiceStatus(SpecModel):
    observed_generation: int | None = Field(
        default=None, description="metadata.generation last reconciled."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    replicas: int | None = Field(
        default=None, description="Pods the child Deployments want (the /scale status)."
    )
    ready_replicas: int | None = Field(
        default=None, description="Pods passing their readiness probe."
    )
    selector: str | None = Field(
        default=None, description="Label selector of all pods, as a string (for the HPA)."
    )
    pools: PoolReplicas | None = Field(
        default=None, description="Desired replicas per capacity pool (stable track)."
    )
    canary_pools: PoolReplicas | None = Field(
        default=None, description="Desired replicas per pool of the canary."
    )
    stable_revision: str | None = Field(
        default=None, description="Hash of what the stable track serves."
    )
    canary_revision: str | None = Field(
        default=None, description="Hash of what the canary track serves."
    )
    canary_weight: int | None = Field(
        default=None, description="Share of traffic on the canary, percent."
    )
    endpoint: str | None = Field(default=None, description="In-cluster URL of the Service.")
    canary: CanaryStatus | None = Field(
        default=None, description="The canary rollout's state machine."
    )
    model_cache: ModelCacheStatus | None = Field(
        default=None, description="The model cache, with model.cache enabled."
    )


# Child names append up to 17 characters ("-canary-on-demand") and must stay valid
# DNS labels and label values (63); pods add a further hash.
NAME_LENGTH_MAX = 40


class TTSService(SpecModel):
    """A whole TTSService object as the API server returns it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    cel_rules: ClassVar[list[dict]] = [
        cel.rule(
            f"self.metadata.name.size() <= {NAME_LENGTH_MAX}",
            f"a TTSService name has at most {NAME_LENGTH_MAX} characters (its children's names extend it)",
        ),
        cel.rule(
            f"self.metadata.name.matches('{DNS1035_LABEL}')",
            "a TTSService name is lowercase letters, digits and '-', starting with a letter and ending with a"
            " letter or digit (a DNS-1035 label: its Service takes the same name)",
        ),
    ]
    api_version: Literal["ttsfleet.io/v1alpha1"] = API_VERSION
    kind: Literal["TTSService"] = KIND
    metadata: dict[str, Any]
    spec: TTSServiceSpec
    status: TTSServiceStatus | None = None

    def cel_self(self) -> dict[str, Any]:
        """Rules at the root of a CRD's schema see only metadata.name and generateName (the
        API server's rule); the whole object would also differ on every pass (status,
        resourceVersion), so the verdict cache (cel.py) would never answer and every pass
        would interpret both rules over the whole object again."""
        kept = {key: self.metadata[key] for key in ("name", "generateName") if key in self.metadata}
        return {"metadata": kept}

    @property
    def name(self) -> str:
        return self.metadata["name"]

    @property
    def namespace(self) -> str:
        return self.metadata.get("namespace") or "default"
