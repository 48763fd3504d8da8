"""A small S3 client: the five calls the cache makes, signed with AWS Signature V4.

Why not boto3 or aiobotocore: they bring botocore's ~100 MB of service models for
five calls, and aiobotocore pins aiohttp and botocore versions tightly. The cache
needs GET, PUT, DELETE, ListObjectsV2 and PUT bucket, path-style (what MinIO,
SeaweedFS, Ceph, R2 and AWS all accept), over httpx, which the runtime already has.
Signing follows the published SigV4 algorithm: a canonical request, the string to
sign over its digest and a key derived from the secret per day, region and service.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import urllib.parse
import xml.etree.ElementTree as ET

import httpx

_UNRESERVED = "-_.~"
_XMLNS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


class S3Error(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(f"S3 answered {status}: {message}")
        self.status = status


def _quote(value: str, safe: str = _UNRESERVED) -> str:
    return urllib.parse.quote(value, safe=safe)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


class S3Client:
    def __init__(
        self,
        endpoint: str,
        bucket: str,
        access_key: str,
        secret_key: str,
        region: str = "us-east-1",
        timeout_s: float = 5.0,
    ):
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.region = region
        self._access_key = access_key
        self._secret_key = secret_key
        self._host = urllib.parse.urlsplit(self.endpoint).netloc
        self._http = httpx.AsyncClient(timeout=timeout_s)

    def __repr__(self) -> str:  # never the secret
        return f"S3Client({self.endpoint!r}, bucket={self.bucket!r})"

    async def get(self, key: str) -> bytes | None:
        response = await self._send("GET", self._path(key))
        # A missing key is a miss; a missing bucket is a misconfiguration, an error.
        if response.status_code == 404 and b"NoSuchBucket" not in response.content:
            return None
        return self._ok(response).content

    async def put(self, key: str, data: bytes, content_type: str = "application/octet-stream"):
        self._ok(await self._send("PUT", self._path(key), body=data, content_type=content_type))

    async def delete(self, key: str) -> None:
        response = await self._send("DELETE", self._path(key))
        if response.status_code != 404:
            self._ok(response)

    async def list_keys(self, prefix: str) -> list[str]:
        """Every key under `prefix` (ListObjectsV2, page by page)."""
        keys: list[str] = []
        token = None
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            response = self._ok(await self._send("GET", f"/{self.bucket}", query=query))
            root = ET.fromstring(response.content)
            keys += [node.text or "" for node in root.iter(f"{_XMLNS}Key")]
            token = root.findtext(f"{_XMLNS}NextContinuationToken")
            if root.findtext(f"{_XMLNS}IsTruncated") != "true" or not token:
                return keys

    async def create_bucket(self) -> None:
        response = await self._send("PUT", f"/{self.bucket}")
        if response.status_code != 409:  # already there (ours)
            self._ok(response)

    async def close(self) -> None:
        await self._http.aclose()

    def _path(self, key: str) -> str:
        return f"/{self.bucket}/{_quote(key, safe=_UNRESERVED + '/')}"

    @staticmethod
    def _ok(response: httpx.Response) -> httpx.Response:
        if response.status_code >= 300:
            raise S3Error(response.status_code, response.text[:200])
        return response

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: bytes = b"",
        content_type: str | None = None,
    ) -> httpx.Response:
        now = datetime.datetime.now(datetime.UTC)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        payload_hash = hashlib.sha256(body).hexdigest()
        headers = {
            "host": self._host,
            "x-amz-content-sha256": payload_hash,
            "x-amz-date": amz_date,
        }
        if content_type:
            headers["content-type"] = content_type
        canonical_query = "&".join(
            f"{_quote(k)}={_quote(v)}" for k, v in sorted((query or {}).items())
        )
        signed = sorted(headers)
        canonical_request = "\n".join(
            [
                method,
                path,
                canonical_query,
                "".join(f"{name}:{headers[name].strip()}\n" for name in signed),
                ";".join(signed),
                payload_hash,
            ]
        )
        scope = f"{day}/{self.region}/s3/aws4_request"
        string_to_sign = "\n".join(
            [
                "AWS4-HMAC-SHA256",
                amz_date,
                scope,
                hashlib.sha256(canonical_request.encode()).hexdigest(),
            ]
        )
        key = _hmac(("AWS4" + self._secret_key).encode(), day)
        for part in (self.region, "s3", "aws4_request"):
            key = _hmac(key, part)
        signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={self._access_key}/{scope}, "
            f"SignedHeaders={';'.join(signed)}, Signature={signature}"
        )
        url = self.endpoint + path + (f"?{canonical_query}" if canonical_query else "")
        return await self._http.request(method, url, headers=headers, content=body)
