"""The operator/runtime settings contract: one catalogue (`ttsfleet_runtime.settings`)
from which the `serve` flags, their TTSFLEET_* variables, the engine ConfigMap and the
TTSService's engine defaults derive, so none of them can disagree."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ttsfleet_operator.cli import build_parser
from ttsfleet_operator.render import render_fleet
from ttsfleet_operator.tts_service import EngineSpec
from ttsfleet_runtime.settings import BY_ENV, SETTINGS, ServerSettings, environment

ROOT = Path(__file__).resolve().parents[2]
ENGINE_SETTINGS = (
    "max_batch",
    "max_len",
    "kv_cache_memory",
    "max_queue",
    "cuda_graphs",
    "first_chunk_frames",
    "weights",
)


def engine_environment(service) -> dict[str, str]:
    (configmap,) = [m for m in render_fleet(service) if m["kind"] == "ConfigMap"]
    return configmap["data"]


def parse_serve(monkeypatch, environ: dict[str, str], *flags: str):
    """`ttsfleet serve` as a pod starts it: no flags, settings from the environment."""
    for name in [n for n in os.environ if n.startswith("TTSFLEET_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return build_parser().parse_args(["serve", *flags])


def crd_engine_schema() -> dict:
    crd = yaml.safe_load((ROOT / "crds" / "ttsservices.ttsfleet.io.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec["properties"]["engine"]["properties"]


def engine_defaults() -> dict:
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    return {name: p.default for name, p in inspect.signature(TTSEngine.__init__).parameters.items()}


def test_the_crd_the_catalogue_and_the_engine_default_alike():
    crd, engine = EngineSpec(), engine_defaults()
    for name in ENGINE_SETTINGS:
        assert getattr(crd, name) == SETTINGS[name].default == engine[name], name
    # The server's, not the engine's: it caps each request's frames.
    assert crd.max_audio_seconds == SETTINGS["max_audio_seconds"].default
    # dtype: the catalogue's None means "bfloat16 on cuda", which is what pods run.
    assert crd.dtype == engine["dtype"] == "bfloat16"
    assert SETTINGS["dtype"].default is None and SETTINGS["device"].default == "cuda"


def test_the_crd_schema_has_the_catalogues_bounds_and_choices():
    schema = crd_engine_schema()
    for name, wire in (
        ("max_batch", "maxBatch"),
        ("max_len", "maxLen"),
        ("kv_cache_memory", "kvCacheMemory"),
        ("max_queue", "maxQueue"),
        ("first_chunk_frames", "firstChunkFrames"),
    ):
        entry = SETTINGS[name]
        assert (schema[wire]["minimum"], schema[wire]["maximum"]) == (
            entry.minimum,
            entry.maximum,
        ), name
        assert schema[wire]["default"] == entry.default
    assert tuple(schema["dtype"]["enum"]) == SETTINGS["dtype"].choices
    assert tuple(schema["weights"]["enum"]) == SETTINGS["weights"].choices
    assert schema["weights"]["default"] == SETTINGS["weights"].default


def test_serve_without_flags_or_variables_is_the_catalogue_default(monkeypatch):
    args = parse_serve(monkeypatch, {}, "--model", "/m")
    flagged = [name for name, entry in SETTINGS.items() if entry.flag is not None]
    assert {name: getattr(args, name) for name in flagged} == {
        name: getattr(ServerSettings(model="/m"), name) for name in flagged
    }


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {
            "model": {"size": "0.6B", "variant": "Base", "revision": "abc123"},
            "runtime": {"apiKeysSecret": "keys"},
        },
        {
            "engine": {
                "maxBatch": 8,
                "maxLen": 1024,
                "kvCacheMemory": 0.3,
                "maxQueue": 1,
                "cudaGraphs": False,
                "dtype": "float32",
                "weights": "fp8",
                "firstChunkFrames": 1,
            },
            "runtime": {"terminationGraceSeconds": 90},
        },
        {
            "cache": {
                "memory": "1Gi",
                "s3": {
                    "endpoint": "http://s3.local:9000",
                    "bucket": "audio",
                    "accessKeySecret": {"name": "s3", "key": "id"},
                    "secretKeySecret": {"name": "s3", "key": "secret"},
                },
            }
        },
    ],
)
def test_every_configmap_variable_is_a_catalogue_setting_that_serve_reads_back(
    make_service, monkeypatch, spec
):
    service = make_service(**spec)
    environ = engine_environment(service)
    assert set(environ) <= set(BY_ENV)
    args = parse_serve(monkeypatch, environ)
    engine = service.spec.engine
    for name in ENGINE_SETTINGS + ("dtype",):
        assert getattr(args, name) == getattr(engine, name), name
    assert args.drain_timeout_s == service.spec.runtime.termination_grace_seconds
    assert args.model_revision == (service.spec.model.revision or None)
    assert args.tokenizer_rate_hz == service.spec.model.tokenizer_rate_hz
    assert args.auth_disabled is (service.spec.runtime.auth == "Disabled")
    assert (args.device, args.port) == ("cuda", 8000)


def test_flag_and_variable_names_are_the_published_ones():
    # Pods, charts and users' scripts name these: rename only with a migration.
    assert {entry.env: entry.flag for entry in SETTINGS.values()} == {
        "TTSFLEET_MODEL": "--model",
        "TTSFLEET_MODEL_REVISION": "--model-revision",
        "TTSFLEET_VERIFY_MODEL": "--verify-model",
        "TTSFLEET_TOKENIZER_RATE_HZ": "--tokenizer-rate-hz",
        "TTSFLEET_DEVICE": "--device",
        "TTSFLEET_HOST": "--host",
        "TTSFLEET_PORT": "--port",
        "TTSFLEET_SERVED_MODEL_NAME": "--served-model-name",
        "TTSFLEET_API_KEYS_FILE": "--api-keys-file",
        "TTSFLEET_API_KEYS": None,  # environment only: keys stay off the command line
        "TTSFLEET_AUTH": "--auth",
        "TTSFLEET_VOICES_DIR": "--voices-dir",
        "TTSFLEET_VOICE_STORE_URL": None,  # environment only: the URL may hold a password
        "TTSFLEET_VOICE_RETENTION_DAYS": "--voice-retention-days",
        "TTSFLEET_ANONYMOUS_VOICES": "--anonymous-voices",
        "TTSFLEET_MAX_VOICES_PER_TENANT": "--max-voices-per-tenant",
        "TTSFLEET_MAX_VOICE_BYTES_PER_TENANT": "--max-voice-bytes-per-tenant",
        "TTSFLEET_VOICE_STORE_TIMEOUT": "--voice-store-timeout",
        "TTSFLEET_VOICE_CACHE_STALE": "--voice-cache-stale",
        "TTSFLEET_RESPONSE_CACHE_MEMORY_BYTES": "--response-cache-memory-bytes",
        "TTSFLEET_RESPONSE_CACHE_MAX_OBJECT_BYTES": "--response-cache-max-object-bytes",
        "TTSFLEET_RESPONSE_CACHE_REDIS_URL": None,
        "TTSFLEET_RESPONSE_CACHE_REDIS_TTL": "--response-cache-redis-ttl",
        "TTSFLEET_RESPONSE_CACHE_S3_ENDPOINT": "--response-cache-s3-endpoint",
        "TTSFLEET_RESPONSE_CACHE_S3_BUCKET": "--response-cache-s3-bucket",
        "TTSFLEET_RESPONSE_CACHE_S3_PREFIX": "--response-cache-s3-prefix",
        "TTSFLEET_RESPONSE_CACHE_S3_REGION": "--response-cache-s3-region",
        "TTSFLEET_RESPONSE_CACHE_S3_ACCESS_KEY": None,
        "TTSFLEET_RESPONSE_CACHE_S3_SECRET_KEY": None,
        "TTSFLEET_RESPONSE_CACHE_S3_TTL_DAYS": "--response-cache-s3-ttl-days",
        "TTSFLEET_RESPONSE_CACHE_TIMEOUT": "--response-cache-timeout",
        # batch synthesis jobs (docs/batch.md)
        "TTSFLEET_BATCH_API": "--batch-api",
        "TTSFLEET_BATCH_WORKER_CONCURRENCY": "--batch-worker-concurrency",
        "TTSFLEET_BATCH_TTFA_BUDGET": "--batch-ttfa-budget",
        "TTSFLEET_BATCH_LEASE": "--batch-lease",
        "TTSFLEET_BATCH_MAX_FILE_BYTES": "--batch-max-file-bytes",
        "TTSFLEET_BATCH_MAX_ITEMS": "--batch-max-items",
        "TTSFLEET_BATCH_S3_PREFIX": "--batch-s3-prefix",
        "TTSFLEET_MAX_BATCH": "--max-batch",
        "TTSFLEET_MAX_LEN": "--max-len",
        "TTSFLEET_KV_CACHE_MEMORY": "--kv-cache-memory",
        "TTSFLEET_MAX_QUEUE": "--max-queue",
        "TTSFLEET_DTYPE": "--dtype",
        "TTSFLEET_WEIGHTS": "--weights",
        "TTSFLEET_CUDA_GRAPHS": "--cuda-graphs",
        "TTSFLEET_COMPILE_CACHE_DIR": "--compile-cache-dir",
        "TTSFLEET_FIRST_CHUNK_FRAMES": "--first-chunk-frames",
        "TTSFLEET_CHUNK_FRAMES": "--chunk-frames",
        "TTSFLEET_CODEC_CONV_ROUTE": "--codec-conv-route",
        "TTSFLEET_DECODE_PRIORITY": "--decode-priority",
        "TTSFLEET_MAX_AUDIO_SECONDS": "--max-audio-seconds",
        "TTSFLEET_DRAIN_TIMEOUT": "--drain-timeout",
        "TTSFLEET_STREAM_BUFFER_SECONDS": "--stream-buffer-seconds",
        "TTSFLEET_SEND_TIMEOUT": "--send-timeout",
        "TTSFLEET_RATE_LIMIT": "--rate-limit",
        "TTSFLEET_RATE_LIMIT_BURST": "--rate-limit-burst",
        "TTSFLEET_MAX_BODY_BYTES": "--max-body-bytes",
        "TTSFLEET_MAX_INPUT_CHARS": "--max-input-chars",
        "TTSFLEET_MAX_VOICE_UPLOAD_BYTES": "--max-voice-upload-bytes",
        "TTSFLEET_MIN_VOICE_SECONDS": "--min-voice-seconds",
        "TTSFLEET_MAX_VOICE_SECONDS": "--max-voice-seconds",
        "TTSFLEET_WS_CONFIG_TIMEOUT": "--ws-config-timeout",
        "TTSFLEET_WS_IDLE_TIMEOUT": "--ws-idle-timeout",
        "TTSFLEET_WS_TEXT_STALL": "--ws-text-stall",
        "TTSFLEET_WS_MAX_SESSIONS_PER_KEY": "--ws-max-sessions-per-key",
        "TTSFLEET_AUTH_FAILURE_RATE": "--auth-failure-rate",
        "TTSFLEET_AUTH_FAILURE_BURST": "--auth-failure-burst",
        "TTSFLEET_HTTP_HEADER_TIMEOUT": "--http-header-timeout",
        "TTSFLEET_HTTP_BODY_TIMEOUT": "--http-body-timeout",
        "TTSFLEET_HTTP_KEEP_ALIVE": "--http-keep-alive",
        "TTSFLEET_MAX_HEADER_BYTES": "--max-header-bytes",
        "TTSFLEET_LOG_LEVEL": "--log-level",
    }


def test_every_server_setting_is_in_the_catalogue():
    assert list(SETTINGS) == list(ServerSettings.__dataclass_fields__)


def test_flags_and_variables_give_the_same_settings(monkeypatch):
    by_flag = parse_serve(
        monkeypatch,
        {},
        "--model",
        "/m",
        "--max-batch",
        "3",
        "--cuda-graphs",
        "off",
        "--auth",
        "disabled",
        "--rate-limit",
        "2.5",
        "--voices-dir",
        "/v",
    )
    by_env = parse_serve(
        monkeypatch,
        {
            "TTSFLEET_MODEL": "/m",
            "TTSFLEET_MAX_BATCH": "3",
            "TTSFLEET_CUDA_GRAPHS": "off",
            "TTSFLEET_AUTH": "disabled",
            "TTSFLEET_RATE_LIMIT": "2.5",
            "TTSFLEET_VOICES_DIR": "/v",
        },
    )
    assert vars(by_flag) == vars(by_env)
    assert (by_env.max_batch, by_env.cuda_graphs, by_env.auth_disabled) == (3, False, True)
    assert by_env.rate_limit_per_s == 2.5 and by_env.voices_dir == Path("/v")


def test_a_flag_beats_its_variable(monkeypatch):
    assert (
        parse_serve(
            monkeypatch, {"TTSFLEET_MAX_BATCH": "3"}, "--model", "/m", "--max-batch", "5"
        ).max_batch
        == 5
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TTSFLEET_MAX_BATCH", "0", "must be at least 1"),
        ("TTSFLEET_MAX_BATCH", "many", "expected an integer"),
        ("TTSFLEET_MAX_LEN", "100", "must be at least 256"),
        ("TTSFLEET_KV_CACHE_MEMORY", "1", "must be at most 0.95"),
        ("TTSFLEET_CUDA_GRAPHS", "yes", "expected on or off"),
        ("TTSFLEET_DTYPE", "int8", "expected one of bfloat16, float16, float32"),
        ("TTSFLEET_WEIGHTS", "int4", "expected one of bf16, fp8, got 'int4'"),
        ("TTSFLEET_PORT", "70000", "must be at most 65535"),
        ("TTSFLEET_LOG_LEVEL", "verbose", "expected one of debug, info, warning, error"),
        ("TTSFLEET_MAX_QUEUE", "0", "must be at least 1"),
        ("TTSFLEET_HTTP_HEADER_TIMEOUT", "0", "must be at least 0.1"),
        ("TTSFLEET_HTTP_BODY_TIMEOUT", "0", "must be at least 0.1"),
        ("TTSFLEET_WS_IDLE_TIMEOUT", "0", "must be at least 0.1"),
    ],
)
def test_a_bad_variable_is_refused_naming_it(monkeypatch, capsys, variable, value, message):
    with pytest.raises(SystemExit) as exit_:
        parse_serve(monkeypatch, {variable: value}, "--model", "/m")
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert message in error and f"{variable}={value}" in error


def test_the_operator_cannot_render_a_value_the_server_refuses():
    with pytest.raises(ValueError, match="at least 1"):
        environment({"max_batch": 0})
    with pytest.raises(KeyError):
        environment({"no_such_setting": 1})


def test_serve_help_names_each_variable_and_default(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for entry in SETTINGS.values():
        if entry.flag is not None:
            assert f"[{entry.env}]" in text, entry.env
    assert "(default: 256) [TTSFLEET_MAX_BATCH]" in text


def test_the_catalogue_imports_only_the_standard_library():
    # The operator imports it; the operator image has no torch (and needs no pydantic here).
    probe = (
        "import sys; before = set(sys.modules); import ttsfleet_runtime.settings; "
        "print('\\n'.join(m.split('.')[0] for m in set(sys.modules) - before))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    loaded = set(result.stdout.split())
    assert "ttsfleet_runtime" in loaded
    assert {m for m in loaded if m not in sys.stdlib_module_names} == {"ttsfleet_runtime"}
