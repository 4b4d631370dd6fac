"""Object store on Google Cloud Storage: the production implementation of :class:`ObjectStore`.

Keys map to objects ``<prefix>/<key>`` of one bucket, whose ``gs://`` URIs Spark and BigQuery
load jobs read. A whole-object upload is atomic and strongly consistent
(cloud.google.com/storage/docs/consistency): no temporary file and rename. Every call passes
google-cloud-storage's ``DEFAULT_RETRY``, uploads too, without the ``if_generation_match`` the
library asks for: writers of one key write the same complete object, so a repeat changes
nothing (cloud.google.com/storage/docs/retry-strategy).
"""

import mimetypes
import os
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from bq_platform.lib.storage.base import ListedObject, ObjectNotFoundError, ObjectStore

#: Per-request HTTP timeout, seconds (connect and read).
GCS_REQUEST_TIMEOUT_S = 60.0

#: Environment variable the storage client reads to reach an emulator (includes the scheme).
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def _validate_key(key: str) -> str:
    """``key`` if relative, without empty, ``.`` or ``..`` parts or CR/LF (GCS forbids them:
    cloud.google.com/storage/docs/objects#naming); else ValueError."""
    if not key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"object key must be relative, non-empty, without a trailing '/': {key!r}")
    parts = key.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\r" in key or "\n" in key:
        raise ValueError(f"object key has an empty, '.' or '..' segment or a newline: {key!r}")
    return key


def _validate_prefix(prefix: str) -> str:
    """Like :func:`_validate_key`, but ``""`` (the whole store) is allowed."""
    return _validate_key(prefix) if prefix else ""


class GCSObjectStore(ObjectStore):
    """An existing bucket, or a folder ``prefix`` in it (several environments can share a
    bucket), as an :class:`ObjectStore`; ``client``: see :func:`gcs_client`;
    ``request_timeout_s``: HTTP timeout per request, seconds."""

    def __init__(
        self,
        bucket: str,
        client: storage.Client,
        prefix: str = "",
        *,
        request_timeout_s: float = GCS_REQUEST_TIMEOUT_S,
    ) -> None:
        if not bucket or "/" in bucket or bucket.startswith("gs:"):
            raise ValueError(f"bucket must be a bare bucket name, got {bucket!r}")
        self.bucket_name = bucket
        self.client = client
        self.prefix = _validate_prefix(prefix.strip("/"))
        self._bucket = client.bucket(bucket)
        self._timeout = request_timeout_s

    # -- names -------------------------------------------------------------------------------

    def _name(self, key: str) -> str:
        key = _validate_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _bound(self, bound: str | None) -> str | None:
        """Object name of a listing bound (any string, e.g. a folder with its ``/``)."""
        if not bound:
            return None
        return f"{self.prefix}/{bound}" if self.prefix else bound

    def _folder(self, prefix: str) -> str:
        """Object-name prefix (ending in ``/``) of a folder key, or the root's."""
        prefix = _validate_prefix(prefix)
        full = "/".join(p for p in (self.prefix, prefix) if p)
        return f"{full}/" if full else ""

    def _key(self, name: str) -> str:
        root = f"{self.prefix}/" if self.prefix else ""
        return name[len(root) :]

    # -- ObjectStore -------------------------------------------------------------------------

    def read_bytes(self, key: str) -> bytes:
        blob = self._bucket.blob(self._name(key))
        try:
            return blob.download_as_bytes(retry=DEFAULT_RETRY, timeout=self._timeout)
        except api_exceptions.NotFound as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        name = self._name(key)
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._bucket.blob(name).upload_from_string(
            data, content_type=content_type, retry=DEFAULT_RETRY, timeout=self._timeout
        )

    def exists(self, key: str) -> bool:
        return self._bucket.blob(self._name(key)).exists(retry=DEFAULT_RETRY, timeout=self._timeout)

    def stat(self, key: str) -> ListedObject:
        blob = self._bucket.get_blob(self._name(key), retry=DEFAULT_RETRY, timeout=self._timeout)
        if blob is None or blob.size is None:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}")
        return ListedObject(int(blob.size), blob.crc32c or None)

    def list_objects(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> dict[str, ListedObject]:
        blobs = self.client.list_blobs(
            self.bucket_name,
            prefix=self._folder(prefix),
            start_offset=self._bound(start),
            end_offset=self._bound(end),
            retry=DEFAULT_RETRY,
            timeout=self._timeout,
        )
        # Consoles' zero-byte "folder" objects (names ending in '/') are not keys. The range is
        # applied again: gcp-storage-emulator ignores startOffset/endOffset (test_emulator_gaps).
        listed = {
            self._key(b.name): ListedObject(int(b.size or 0), b.crc32c or None)
            for b in blobs
            if not b.name.endswith("/")
        }
        return {k: listed[k] for k in sorted(listed) if self.in_range(k, start, end)}

    def list_folders(self, prefix: str) -> list[str]:
        folder = self._folder(prefix)
        iterator = self.client.list_blobs(
            self.bucket_name,
            prefix=folder,
            delimiter="/",
            retry=DEFAULT_RETRY,
            timeout=self._timeout,
        )
        for _page in iterator.pages:  # ``prefixes`` fills in as pages are read
            pass
        names = {p[len(folder) :].rstrip("/") for p in iterator.prefixes}
        return sorted(n for n in names if n)

    def delete_prefix(self, prefix: str) -> int:
        """Delete the objects under the folder ``prefix`` one by one; how many this call
        deleted (not one another run deleted meanwhile). ValueError for an empty or malformed
        ``prefix``: a pipeline step never deletes a whole store."""
        if not prefix:
            raise ValueError("delete_prefix needs a folder; refusing to delete the whole store")
        deleted = 0
        for blob in self.client.list_blobs(
            self.bucket_name,
            prefix=self._folder(prefix),
            retry=DEFAULT_RETRY,
            timeout=self._timeout,
        ):
            try:
                blob.delete(retry=DEFAULT_RETRY, timeout=self._timeout)
            except api_exceptions.NotFound:
                continue
            deleted += 1
        return deleted

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket_name}/{self._name(key)}"

    def key_for_uri(self, uri: str) -> str:
        root = f"gs://{self.bucket_name}/" + (f"{self.prefix}/" if self.prefix else "")
        if not uri.startswith(root) or len(uri) == len(root):
            raise ValueError(f"{uri} is not inside the GCS store {root}")
        return _validate_key(uri[len(root) :])


def gcs_client(
    project: str | None,
    *,
    credentials: Credentials | None = None,
    emulator_host: str | None = None,
    http: Any = None,
) -> storage.Client:
    """A ``google.cloud.storage.Client`` of ``project`` (may be None), with Application Default
    Credentials unless ``credentials`` is given, or unauthenticated for an emulator at
    ``emulator_host`` (scheme included; default ``STORAGE_EMULATOR_HOST`` at call time).
    ``http``: the ``requests.Session`` to send through (tests record with it)."""
    emulator_host = emulator_host or os.environ.get(STORAGE_EMULATOR_ENV) or None
    if emulator_host:
        return storage.Client(
            project=project or "emulator-project",
            credentials=credentials or AnonymousCredentials(),
            client_options={"api_endpoint": emulator_host},
            _http=http,
        )
    return storage.Client(project=project, credentials=credentials, _http=http)


#: Alias of :func:`gcs_client` (the name ``defs/resources.py`` imports).
storage_client = gcs_client
