"""The `ttsfleet` command line.

Operator commands live here; the runtime's (`serve`, `checkpoint`, `bench`) are
registered by `ttsfleet_runtime.cli.register`, which imports nothing heavy until
one of them runs. Only this module's handlers import kopf or the API client.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import yaml


def _render(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ttsfleet_operator import grammar, yaml_input
    from ttsfleet_operator.render import api_keys, render_fleet
    from ttsfleet_operator.tts_service import TTSService

    try:
        documents = yaml_input.load_documents(_read_input(args.file))
    except (OSError, UnicodeDecodeError, yaml_input.YamlInputError) as error:
        print(f"error: {args.file}: {error}", file=sys.stderr)
        return 1
    manifests = []
    for number, document in enumerate(documents, 1):
        if not isinstance(document, dict) or not isinstance(document.get("metadata", {}), dict):
            print(
                f"error: document {number} is not a TTSService (a mapping with metadata)",
                file=sys.stderr,
            )
            return 1
        if args.replicas is not None:
            spec = document.setdefault("spec", {})
            if isinstance(spec, dict):
                spec["replicas"] = args.replicas
        namespace = document.setdefault("metadata", {}).setdefault("namespace", args.namespace)
        if not isinstance(namespace, str) or not grammar.is_dns_label(namespace):
            print(
                f"error: {namespace!r} is not a namespace name (a DNS-1123 label)", file=sys.stderr
            )
            return 1
        try:
            service = TTSService.model_validate(document)
        except ValidationError as error:
            name = document["metadata"].get("name", "?")
            print(f"error: TTSService {name!r} is invalid:\n{error}", file=sys.stderr)
            return 1
        secret_name = api_keys.generated_secret_name(service)
        if secret_name:
            # Not printed: applied, it would replace the key the operator created (which it
            # never rewrites), and a live credential would land in whatever logs stdout.
            print(
                f"note: the operator creates Secret {namespace}/{secret_name} (the pods' API"
                " key) on its first pass; read the key with: kubectl get secret"
                f" {secret_name} -n {namespace} -o jsonpath='{{.data.keys}}' | base64 -d",
                file=sys.stderr,
            )
        manifests += render_fleet(service)
    sys.stdout.write(yaml.safe_dump_all(manifests, sort_keys=False, width=120))
    return 0


def _read_input(path: str) -> str:
    """The file (or stdin), refused past the loader's limit without reading the rest."""
    from ttsfleet_operator.yaml_input import MAX_BYTES

    if path == "-":
        return sys.stdin.read(MAX_BYTES + 1)
    with open(path, encoding="utf-8") as file:
        return file.read(MAX_BYTES + 1)


def _crd(args: argparse.Namespace) -> int:
    from ttsfleet_operator import crd, field_docs

    sys.stdout.write(field_docs.markdown() if args.fields else crd.to_yaml())
    return 0


def _operator_run(args: argparse.Namespace) -> int:
    from ttsfleet_operator import operator_main

    return operator_main.run(
        namespaces=args.namespace,
        all_namespaces=args.all_namespaces,
        liveness=args.liveness,
        resync_seconds=args.resync_seconds,
        kubeconfig=args.kubeconfig,
        verbose=args.verbose,
        metrics_port=args.metrics_port,
        prometheus_url=args.prometheus_url or None,
        election=_election_settings(args),
    )


def _election_settings(args: argparse.Namespace):
    from ttsfleet_operator import leadership, operator_main

    if not args.leader_election:
        return None
    given = {
        field: value
        for field, value in (
            ("lease_duration", args.lease_duration),
            ("renew_deadline", args.renew_deadline),
            ("retry_period", args.retry_period),
        )
        if value is not None
    }
    return operator_main.LeaderElectionSettings(
        namespace=args.leader_election_namespace,
        name=args.leader_election_lease or leadership.DEFAULT_LEASE_NAME,
        timing=leadership.LeaseTiming(**given),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ttsfleet", description="Qwen3-TTS fleets on Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    render = commands.add_parser(
        "render", help="print the manifests the operator applies for a TTSService"
    )
    render.add_argument(
        "-f", "--file", required=True, help="TTSService YAML file ('-' reads stdin)"
    )
    render.add_argument(
        "--replicas", type=int, help="override spec.replicas (shows the pool split)"
    )
    render.add_argument(
        "-n", "--namespace", default="default", help="namespace when the file names none"
    )
    render.set_defaults(handler=_render)

    crd = commands.add_parser("crd", help="print the TTSService CustomResourceDefinition")
    crd.add_argument(
        "--fields", action="store_true", help="print every field and rule as Markdown instead"
    )
    crd.set_defaults(handler=_crd)

    operator = commands.add_parser("operator", help="the Kubernetes operator")
    operator_commands = operator.add_subparsers(
        dest="operator_command", required=True, metavar="COMMAND"
    )
    run = operator_commands.add_parser("run", help="reconcile TTSServices until stopped")
    scope = run.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", "--namespace", action="append", help="watch this namespace (repeatable)"
    )
    scope.add_argument(
        "-A", "--all-namespaces", action="store_true", help="watch every namespace (the default)"
    )
    run.add_argument(
        "--liveness",
        default="http://0.0.0.0:8080/healthz",
        help="liveness endpoint URL ('' disables it)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=8081,
        help="serve Prometheus /metrics on this port (0 disables it)",
    )
    run.add_argument(
        "--prometheus-url",
        default=os.environ.get("TTSFLEET_PROMETHEUS_URL", ""),
        help="Prometheus the canary analysis queries (env TTSFLEET_PROMETHEUS_URL); unset: every interval is"
        " inconclusive",
    )
    run.add_argument(
        "--resync-seconds", type=float, default=30.0, help="period of the drift-correcting timer"
    )
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: in-cluster, then $KUBECONFIG, ~/.kube/config)",
    )
    election = run.add_argument_group(
        "leader election", "of several replicas only the Lease's holder acts (docs/operator-ha.md)"
    )
    election.add_argument(
        "--leader-election",
        action="store_true",
        help="wait as a follower until this process holds the Lease (the chart turns it on)",
    )
    election.add_argument(
        "--leader-election-namespace",
        default=os.environ.get("POD_NAMESPACE") or "ttsfleet-system",
        help="namespace of the Lease (default: $POD_NAMESPACE, else ttsfleet-system)",
    )
    # Unset: the defaults of leadership.py (DEFAULT_LEASE_NAME, LeaseTiming), listed in
    # docs/operator-ha.md.
    election.add_argument("--leader-election-lease", help="name of the Lease (ttsfleet-operator)")
    election.add_argument(
        "--lease-duration",
        type=float,
        help="seconds a follower waits on an unchanged Lease before taking it (8)",
    )
    election.add_argument(
        "--renew-deadline",
        type=float,
        help="seconds a leader may go without renewing before it exits (5)",
    )
    election.add_argument(
        "--retry-period", type=float, help="seconds between renewals and looks (1)"
    )
    run.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    run.set_defaults(handler=_operator_run)

    _register_commands_of_other_packages(commands)
    return parser


# Other packages add `ttsfleet` subcommands by naming a `register(subparsers)` under this
# entry-point group (pyproject.toml: the runtime's serve, checkpoint, fetch, bench, ...).
# The operator knows none of them by name, so its layers stay apart from theirs.
COMMANDS_ENTRY_POINTS = "ttsfleet.commands"


def _register_commands_of_other_packages(commands) -> None:
    from importlib import metadata

    # Every distribution's entries, not entry_points()'s: that keeps one distribution per
    # name, and in a checkout a stale ttsfleet.egg-info beside the code hides the
    # installed metadata.
    entries = {}
    for distribution in metadata.distributions():
        for entry in distribution.entry_points.select(group=COMMANDS_ENTRY_POINTS):
            entries.setdefault(entry.name, entry)
    for entry in entries.values():
        try:
            register = entry.load()
        except ModuleNotFoundError as error:
            # The operator image installs the distribution without the runtime's package:
            # its commands are absent there. A module that is present but broken fails loudly.
            if error.name is None or not entry.module.startswith(error.name):
                raise
            continue
        register(commands)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
