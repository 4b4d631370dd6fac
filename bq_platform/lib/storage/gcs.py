"""Object store on Google Cloud Storage: the production implementation of :class:`ObjectStore`.

Keys map to object names ``<prefix>/<key>`` in one bucket, and :meth:`GCSObjectStore.uri` gives
``gs://<bucket>/<prefix>/<key>``, which Spark (through the cluster's GCS connector) and BigQuery
load jobs read directly.

Consistency: GCS writes are atomic per object and strongly consistent (read-after-write and
list-after-write, cloud.google.com/storage/docs/consistency), so a whole-object upload is the
"readers see the old or the new bytes" write the interface asks for; there is no temporary file
and rename as on a local disk.

Retries: every call passes :data:`GCS_RETRY`, google-cloud-storage's ``DEFAULT_RETRY`` (429, 408,
5xx and connection errors; exponential backoff with jitter) with a bounded 120-s budget and the
1 s -> 32 s backoff of :mod:`bq_platform.lib.gcp_retries`. Uploads are retried too: every write of
a key carries the complete object, so repeating it gives the same final object
(cloud.google.com/storage/docs/retry-strategy discusses when an unconditional upload retry is
safe; here it is, because writers of one key write the same content, e.g. a manifest of one
attempt).
"""

import mimetypes
import os
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import storage
from google.cloud.storage import retry as storage_retry

from bq_platform.lib.storage.base import ListedObject, ObjectNotFoundError, ObjectStore
from bq_platform.lib.gcp_retries import INITIAL_DELAY_S, MAXIMUM_DELAY_S, MULTIPLIER

#: Total retry budget of one GCS call, seconds (the storage client's own default).
GCS_RETRY_TIMEOUT_S = 120.0
#: Per-request HTTP timeout, seconds (connect and read).
GCS_REQUEST_TIMEOUT_S = 60.0

#: Bounded retry used for every GCS call.
GCS_RETRY = storage_retry.DEFAULT_RETRY.with_timeout(GCS_RETRY_TIMEOUT_S).with_delay(
    initial=INITIAL_DELAY_S, maximum=MAXIMUM_DELAY_S, multiplier=MULTIPLIER
)

#: Environment variable the storage client reads to reach an emulator (includes the scheme).
STORAGE_EMULATOR_ENV = "STORAGE_EMULATOR_HOST"


def _validate_key(key: str) -> str:
    """Return ``key`` if it is a relative ``/``-separated key without empty/``.``/``..`` parts.

    Raises:
        ValueError: for absolute keys, empty segments, ``.``/``..``, or CR/LF (GCS forbids
            them in object names: cloud.google.com/storage/docs/objects#naming).
    """
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
    """A GCS bucket (optionally a folder inside it) behind the :class:`ObjectStore` interface.

    Args:
        bucket: bucket name (``gs://<bucket>``); the bucket must exist.
        client: a ``google.cloud.storage.Client`` (see :func:`gcs_client`).
        prefix: folder inside the bucket that plays the store's root, without leading or
            trailing ``/`` (``""`` = the bucket root). Lets several environments share a bucket.
        request_timeout_s: HTTP timeout of each request, seconds.
    """

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
            return blob.download_as_bytes(retry=GCS_RETRY, timeout=self._timeout)
        except api_exceptions.NotFound as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        name = self._name(key)
        content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        self._bucket.blob(name).upload_from_string(
            data, content_type=content_type, retry=GCS_RETRY, timeout=self._timeout
        )

    def exists(self, key: str) -> bool:
        return self._bucket.blob(self._name(key)).exists(retry=GCS_RETRY, timeout=self._timeout)

    def stat(self, key: str) -> ListedObject:
        blob = self._bucket.get_blob(self._name(key), retry=GCS_RETRY, timeout=self._timeout)
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
            retry=GCS_RETRY,
            timeout=self._timeout,
        )
        # Zero-byte "folder" placeholders (names ending in '/') made by consoles are not keys.
        # The range is applied again here: gcp-storage-emulator ignores startOffset/endOffset
        # (GAP-GCS-OFFSETS, test_emulator_gaps.py), GCS applies them server-side.
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
            retry=GCS_RETRY,
            timeout=self._timeout,
        )
        for _page in iterator.pages:  # ``prefixes`` fills in as pages are read
            pass
        names = {p[len(folder) :].rstrip("/") for p in iterator.prefixes}
        return sorted(n for n in names if n)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under the folder ``prefix``; return how many this call deleted.

        Objects are listed, then deleted one by one (each delete retried); an object that
        disappears in between (another run deleted it) is not counted. ``prefix`` must not be
        empty: deleting a whole store is not something a pipeline step does.

        Raises:
            ValueError: if ``prefix`` is empty or malformed.
        """
        if not prefix:
            raise ValueError("delete_prefix needs a folder; refusing to delete the whole store")
        deleted = 0
        for blob in self.client.list_blobs(
            self.bucket_name, prefix=self._folder(prefix), retry=GCS_RETRY, timeout=self._timeout
        ):
            try:
                blob.delete(retry=GCS_RETRY, timeout=self._timeout)
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
    """Build a ``google.cloud.storage.Client``.

    Production: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, the
    metadata server on GCE/GKE/Dataproc, or ``gcloud auth application-default login``) unless
    ``credentials`` is given. Emulator: ``emulator_host`` (e.g. ``http://127.0.0.1:9023``), or
    the ``STORAGE_EMULATOR_HOST`` environment variable when it is set at call time; requests
    then go there without authentication.

    Args:
        project: GCP project ID (used for bucket creation and listing; may be None).
        credentials: explicit credentials; default ADC (or anonymous for an emulator).
        emulator_host: base URL of a GCS emulator, scheme included.
        http: the ``requests.Session`` the client sends its requests through (default its
            own); tests and ``scripts/bench_http.py`` pass one that records them.

    Returns:
        The client.
    """
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
