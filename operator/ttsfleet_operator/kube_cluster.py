"""`Cluster` over kubernetes-asyncio: one HTTP request per method.

Why kubernetes-asyncio rather than kopf's API helpers: kopf's are private
(`kopf._cogs.clients`) and patch only the resources it watches; we need
server-side apply (`application/apply-patch+yaml`) on our child kinds,
deletes with a UID precondition and Events. kubernetes-asyncio gives the
authenticated HTTP session (kubeconfig or in-cluster token) and nothing more is
used from it: paths come from the small table below, bodies are plain dicts.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import aiohttp.helpers
import yarl
from kubernetes_asyncio import client, config

from ttsfleet_operator import child_kinds, tts_service
from ttsfleet_operator.cluster import FIELD_MANAGER, ApiError

# kind -> plural; the only kinds the operator touches: its children, Events, TTSServices.
PLURALS = {
    **{child.kind: child.plural for child in (*child_kinds.ALL, *child_kinds.CREATED_ONCE)},
    "Event": "events",
    tts_service.KIND: tts_service.PLURAL,
}


async def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """In-cluster service account first, then the kubeconfig (explicit, $KUBECONFIG, ~/.kube/config)."""
    configuration = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            await config.load_kube_config(client_configuration=configuration)
    else:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return configuration


def connection_info(configuration: client.Configuration) -> dict:
    """kopf's login fields for the same credentials, so kopf's watches and our
    requests authenticate alike (exec plugins included, which kopf cannot run)."""
    scheme, token = None, None
    header = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
    if header:
        parts = header.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else ("Bearer", parts[0])
    return {
        "server": configuration.host,
        "ca_path": configuration.ssl_ca_cert,
        "insecure": not configuration.verify_ssl,
        "scheme": scheme,
        "token": token,
        "certificate_path": configuration.cert_file,
        "private_key_path": configuration.key_file,
    }


def _kind_path(api_version: str, kind: str, namespace: str | None) -> str:
    """A kind's collection in a namespace, or across all namespaces (None)."""
    if namespace is not None:
        return collection_path(api_version, kind, namespace)
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/{PLURALS[kind]}"


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{PLURALS[kind]}"


# Discovery answers are kept this long: installing Gateway API is noticed within a minute
# without a discovery request on every pass.
SERVED_CACHE_SECONDS = 60.0


# Told of every request sent: (HTTP verb, resource), e.g. ("PATCH", "deployments").
RequestCounter = Callable[[str, str], None]


def resource_of(path: str) -> str:
    """The resource a request path names: its plural, `/status` kept; discovery for group paths."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        rest = parts[parts.index("namespaces") + 2 :]
        return "/".join([rest[0], *rest[2:]])
    return "discovery"


def _env_proxy(host: str) -> tuple[str | None, aiohttp.BasicAuth | None]:
    """The proxy the environment names for the API server (HTTPS_PROXY, NO_PROXY), if any."""
    try:
        proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(host))
    except LookupError:
        return None, None
    return str(proxy), auth


class KubeCluster:
    """Requests over kubernetes-asyncio's authenticated connection, sent by a session of its own.

    kubernetes-asyncio's `call_api` walks every body to sanitise it and its session trusts
    the environment, which sends two lookups a request (the proxy variables, ~/.netrc) to a
    thread: together about a tenth of the operator's CPU in a bulk create. Here a body is
    serialised once, the proxy is looked up once, and the credentials still come from the
    client's configuration on every request (an exec plugin's token is refreshed there).
    """

    def __init__(self, api: client.ApiClient, count_request: RequestCounter | None = None):
        self.api = api
        self._served: dict[tuple[str, str], tuple[bool, float]] = {}
        self._count_request = count_request
        self._session: aiohttp.ClientSession | None = None
        self._proxy: dict[str, Any] = {}

    def _open_session(self) -> aiohttp.ClientSession:
        rest = self.api.rest_client
        if rest.proxy:
            self._proxy = {"proxy": rest.proxy, "proxy_headers": rest.proxy_headers}
        else:
            proxy, proxy_auth = _env_proxy(self.api.configuration.host)
            if proxy is not None:
                self._proxy = {"proxy": proxy, "proxy_auth": proxy_auth}
        if rest.server_hostname:
            self._proxy["server_hostname"] = rest.server_hostname
        # The client's connector: its TLS context (CA, client certificate) and pool.
        return aiohttp.ClientSession(
            connector=rest.pool_manager.connector,
            connector_owner=False,
            trust_env=False,
            read_bufsize=2**21,  # as the client's: large objects in one answer
        )

    @classmethod
    async def connect(
        cls, kubeconfig: str | None = None, count_request: RequestCounter | None = None
    ) -> KubeCluster:
        return cls(client.ApiClient(await load_configuration(kubeconfig)), count_request)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        await self.api.close()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict | None:
        if self._count_request is not None:
            self._count_request(method, resource_of(path))
        return await self._send(method, path, query, body, content_type)

    async def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict | None:
        if self._session is None:
            self._session = self._open_session()
        headers = {
            **self.api.default_headers,
            "Accept": "application/json",
            "Content-Type": content_type,
        }
        query = list(query or [])
        await self.api.update_params_for_auth(headers, query, ["BearerToken"])
        url = self.api.configuration.host + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        async with self._session.request(
            method, url, data=data, headers=headers, **self._proxy
        ) as response:
            answer = await response.read()
            if response.status == 404 and method in ("GET", "DELETE"):
                return None
            if not 200 <= response.status < 300:
                raise ApiError(response.status, _message(answer))
            return json.loads(answer) if answer else {}

    async def list_and_version(
        self, api_version: str, kind: str, namespace: str | None, selector: str
    ) -> tuple[list[dict], str]:
        """Every object of a kind (in a namespace, or all) that `selector` matches, and the
        list's resourceVersion to watch from. Like a watch, not counted as a pass's request."""
        result = await self._send(
            "GET", _kind_path(api_version, kind, namespace), [("labelSelector", selector)]
        )
        return (result or {}).get("items") or [], (result or {}).get("metadata", {}).get(
            "resourceVersion", ""
        )

    async def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> AsyncIterator[dict]:
        """The watch events after `resource_version`, decoded, until the server ends the
        stream (after `timeout_seconds`). A long-lived stream, not a pass's request: not counted."""
        if self._session is None:
            self._session = self._open_session()
        query = [
            ("labelSelector", selector),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        headers = {**self.api.default_headers, "Accept": "application/json"}
        await self.api.update_params_for_auth(headers, query, ["BearerToken"])
        url = f"{self.api.configuration.host}{_kind_path(api_version, kind, namespace)}?{urllib.parse.urlencode(query)}"
        # No read timeout: a quiet watch sends nothing for minutes (bookmarks aside).
        timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_seconds + 60)
        async with self._session.request(
            "GET", url, headers=headers, timeout=timeout, **self._proxy
        ) as response:
            if response.status != 200:
                raise ApiError(response.status, _message(await response.read()))
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)

    async def serves(self, api_version: str, kind: str) -> bool:
        cached = self._served.get((api_version, kind))
        if cached is not None and time.monotonic() - cached[1] < SERVED_CACHE_SECONDS:
            return cached[0]
        prefix = "/api" if "/" not in api_version else "/apis"
        result = await self._request("GET", f"{prefix}/{api_version}")
        served = any(
            resource.get("kind") == kind for resource in (result or {}).get("resources", [])
        )
        self._served[(api_version, kind)] = (served, time.monotonic())
        return served

    async def list(
        self, api_version: str, kind: str, namespace: str, selector: dict[str, str]
    ) -> list[dict]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        result = await self._request(
            "GET", collection_path(api_version, kind, namespace), query=query
        )
        return (result or {}).get("items", [])

    async def create(self, manifest: dict) -> dict:
        path = collection_path(
            manifest["apiVersion"], manifest["kind"], manifest["metadata"]["namespace"]
        )
        return await self._request(
            "POST", path, query=[("fieldManager", FIELD_MANAGER)], body=manifest
        )

    async def apply(self, manifest: dict, live: dict | None = None) -> dict:
        metadata = manifest["metadata"]
        path = f"{collection_path(manifest['apiVersion'], manifest['kind'], metadata['namespace'])}/{metadata['name']}"
        try:
            return await self._server_side_apply(path, manifest)
        except ApiError as error:
            if error.status != 422 or live is None:
                raise
        # Refused as invalid. Entries another manager holds in a list can do that however
        # often we apply: a Service port edited by hand keeps its entry beside ours, both
        # named "http". Replace each rendered top-level field (spec, ...) of the listed object
        # with ours once, by a JSON patch guarded by its resourceVersion (the `patch` verb
        # RBAC grants; a genuinely invalid rendering is refused here too, with its message;
        # a newer object fails the guard and the next pass sees it), then apply again so we
        # own the fields as before.
        operations = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": live["metadata"]["resourceVersion"],
            }
        ]
        operations += [
            {
                "op": "replace" if key in live else "add",
                "path": f"/{key}",
                "value": _overlay(live.get(key), value),
            }
            for key, value in manifest.items()
            if key not in ("apiVersion", "kind", "metadata")
        ]
        await self._request(
            "PATCH",
            path,
            query=[("fieldManager", FIELD_MANAGER)],
            body=operations,
            content_type="application/json-patch+json",
        )
        return await self._server_side_apply(path, manifest)

    async def _server_side_apply(self, path: str, manifest: dict) -> dict:
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        # JSON is YAML: the apply content type accepts the dict as serialised JSON.
        return await self._request(
            "PATCH", path, query=query, body=manifest, content_type="application/apply-patch+yaml"
        )

    async def delete(
        self, api_version: str, kind: str, namespace: str, name: str, uid: str
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {"uid": uid},
        }
        try:
            await self._request(
                "DELETE", f"{collection_path(api_version, kind, namespace)}/{name}", body=body
            )
        except ApiError as error:
            if (
                error.status != 409
            ):  # 409: the UID changed, a namesake replaced it; leave that one be
                raise

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict
    ) -> dict:
        path = f"{collection_path(api_version, kind, namespace)}/{name}/status"
        return await self._request(
            "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
        )

    async def emit_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        now = datetime.datetime.now(datetime.UTC)
        metadata = owner["metadata"]
        namespace = metadata.get("namespace", "default")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": metadata["name"],
                "namespace": namespace,
                "uid": metadata["uid"],
                "resourceVersion": metadata.get("resourceVersion", ""),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": "ttsfleet-operator"},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "count": 1,
        }
        await self._request("POST", collection_path("v1", "Event", namespace), body=event)


def _overlay(live: Any, desired: Any) -> Any:
    """`live` with every field `desired` sets taken from `desired`; lists are replaced whole."""
    if isinstance(live, dict) and isinstance(desired, dict):
        return {**live, **{key: _overlay(live.get(key), value) for key, value in desired.items()}}
    return desired


def _message(data: bytes) -> str:
    try:
        return json.loads(data).get("message", "") or data.decode(errors="replace")
    except (ValueError, AttributeError):
        return data.decode(errors="replace")[:500]
