"""A stand-in for the Hugging Face hub over real HTTP, because the tests have no internet.

It answers the two routes `huggingface_hub` uses to fetch a snapshot: the revision's
description (`/api/models/<repo>/revision/<rev>`, with file sizes, LFS sha256 and git
blob ids) and the files (`/<repo>/resolve/<commit>/<path>`, HEAD and GET, with the
X-Repo-Commit and ETag headers the client checks). Errors carry the hub's X-Error-Code
header, as the real hub does, so the client raises its own exceptions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

# Files at or above this size are served as LFS files (sha256 in the description).
LFS_FROM_BYTES = 64


@dataclasses.dataclass
class FakeRepo:
    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    # Only this token may read it (None: public).
    token: str | None = None
    # Served in place of a file's content (a mirror that serves what it should not).
    corrupt: dict[str, bytes] = dataclasses.field(default_factory=dict)


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _describe(name: str, repo: FakeRepo) -> dict:
    siblings = []
    for path, data in repo.files.items():
        sibling = {"rfilename": path, "size": len(data), "blobId": _git_blob_id(data)}
        if len(data) >= LFS_FROM_BYTES:
            sibling["lfs"] = {
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "pointerSize": 134,
            }
        siblings.append(sibling)
    return {"id": name, "modelId": name, "sha": repo.commit, "siblings": siblings, "private": False}


class FakeHub:
    """`with FakeHub({"owner/name": FakeRepo(...)}) as hub:` serves at `hub.endpoint`."""

    def __init__(self, repos: dict[str, FakeRepo]):
        self.repos = repos
        self.requests: list[str] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _error(self, status: int, code: str | None, message: str = "") -> None:
                headers = {"X-Error-Code": code} if code else {}
                if message:
                    headers["X-Error-Message"] = message
                self._send(status, json.dumps({"error": message or code}).encode(), headers)

            def _repo(self, name: str) -> FakeRepo | None:
                repo = hub.repos.get(name)
                if repo is None:
                    self._error(404, "RepoNotFound")
                    return None
                sent = self.headers.get("Authorization", "")
                if repo.token is not None and sent != f"Bearer {repo.token}":
                    if sent:
                        self._error(401, None, "Invalid credentials in Authorization header")
                    else:
                        self._error(403, "GatedRepo", "Access to model is restricted")
                    return None
                return repo

            def do_GET(self) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append(f"{self.command} {path}")
                api = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
                if api:
                    name, revision = api.groups()
                    repo = self._repo(name)
                    if repo is None:
                        return
                    if revision not in (*repo.revisions, repo.commit):
                        self._error(404, "RevisionNotFound")
                        return
                    body = json.dumps(_describe(name, repo)).encode()
                    self._send(200, body, {"Content-Type": "application/json"})
                    return
                resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if resolve:
                    name, revision, file_path = resolve.groups()
                    repo = self._repo(name)
                    if repo is None:
                        return
                    if file_path not in repo.files:
                        self._error(404, "EntryNotFound")
                        return
                    data = repo.files[file_path]
                    etag = (
                        hashlib.sha256(data).hexdigest()
                        if len(data) >= LFS_FROM_BYTES
                        else _git_blob_id(data)
                    )
                    served = repo.corrupt.get(file_path, data)
                    self._send(
                        200,
                        served,
                        {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"'},
                    )
                    return
                self._error(404, None, f"no route {path}")

            do_HEAD = do_GET

        return Handler
