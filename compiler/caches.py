"""pyacc's caches on disk: where they live, and that only the files pyacc wrote for this
user are used from them.

Owns :func:`cache_dir` (the kernel cache folder: ``$PYACC_CACHE_DIR/kernels``, else the
user's cache folder), the cache key, the signing and checking of cached artifacts, and
the creation and checking of cache folders. The kernel caches hold code: a generated kernel module is
imported, and Numba's cache files beside it are unpickled (which runs code). Anyone who
can write the folder could otherwise run code in every process that reads it (a shared
``PYACC_CACHE_DIR=/scratch/...`` of a campaign, a group-writable folder).

- **The key**: 32 random bytes in a file only the user can read: the file
  ``$PYACC_CACHE_KEY`` names when set (sharing a cache between users on purpose: every
  user points at the same key file), else ``<config>/pyacc/cache.key`` (``<config>`` is
  ``$XDG_CONFIG_HOME`` or ``~/.config``), created ``0600`` on first use (``O_EXCL``: two
  processes creating it at once agree on one key).
- **Signed artifacts**, an HMAC-SHA256 of their content under the key:
  generated modules end with one line ``# pyacc-signature: <hex>`` over the text before
  it (:func:`signed_text`, :func:`verified_text`); Numba's cache files (index ``.nbi``,
  data ``.nbc``) of pyacc's dispatchers start with :data:`MAGIC` and the tag
  (:func:`sign_dispatcher_cache` swaps the dispatcher's cache-file object for a signing
  subclass of its own class: Numba's, numba-cuda's and numba-cuda-mlir's share that
  design); small records (the serial crossover) through :func:`signed_bytes` /
  :func:`verified_bytes`.
- **A file whose signature is missing or wrong**, truncated, empty, unreadable or
  garbage is never imported, unpickled or believed: it counts as absent (the caller
  regenerates it, and replaces it where the folder is writable), with one
  :class:`CacheTrustWarning` per file and process naming it.
- **Folders** pyacc creates are ``0700`` (:func:`private_folder`); an existing folder
  that others can write (group or world, without the sticky bit) or that another user
  owns gets one warning naming it and the fix.

Invariants: a file's content is verified before any of it is executed or unpickled;
the key itself never appears in the environment or a message; warnings are given once
per path and process.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import os
import pickle
import secrets
import stat
import threading
import warnings
from pathlib import Path

__all__ = ["cache_dir", "CacheTrustWarning", "KEY_ENVIRONMENT", "MAGIC", "key", "key_path", "sign",
           "signed_text", "verified_text", "signed_bytes", "verified_bytes",
           "private_folder", "sign_dispatcher_cache", "warn_once"]

#: the setting that names a key file (sharing a cache between users on purpose)
KEY_ENVIRONMENT = "PYACC_CACHE_KEY"
#: what a signed binary artifact starts with (then the 32-byte tag, then the content)
MAGIC = b"PYACCSIG1\n"
_TAG_BYTES = 32
_SIGNATURE_LINE = "# pyacc-signature: "

_lock = threading.Lock()
_keys: dict[str, bytes] = {}
_warned: set = set()


class CacheTrustWarning(UserWarning):
    """A cached file pyacc did not write for this user (or a cache folder others can
    write) was found; the file is not used."""


def warn_once(path, message: str) -> None:
    """One :class:`CacheTrustWarning` per path and process."""
    with _lock:
        if str(path) in _warned:
            return
        _warned.add(str(path))
    warnings.warn(message, CacheTrustWarning, stacklevel=3)


# -- where ----------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Folder of generated kernel modules: ``$PYACC_CACHE_DIR/kernels``, else
    ``<cache>/pyacc/kernels`` (``$XDG_CACHE_HOME`` or ``~/.cache``); made private."""
    root = os.environ.get("PYACC_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "pyacc")
    return private_folder(Path(root) / "kernels")


# -- the key ---------------------------------------------------------------------------------
def key_path() -> Path:
    """The key file: ``$PYACC_CACHE_KEY``, else ``<config>/pyacc/cache.key``."""
    named = os.environ.get(KEY_ENVIRONMENT, "").strip()
    if named:
        return Path(named).expanduser()
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "pyacc" / "cache.key"


def key() -> bytes:
    """The cache key (read once per process and key file; created when missing).

    Raises:
        OSError: the key file cannot be read or created (the caller then uses no cache).
    """
    path = key_path()
    found = _keys.get(str(path))
    if found is None:
        with _lock:
            found = _keys.get(str(path))
            if found is None:
                found = _keys[str(path)] = _read_or_create(path)
    return found


def _read_or_create(path: Path) -> bytes:
    if not path.exists():
        private_folder(path.parent)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: use theirs
            pass
        else:
            with os.fdopen(descriptor, "wb") as out:
                out.write(secrets.token_bytes(_TAG_BYTES))
    data = path.read_bytes()
    if len(data) < 16:
        raise OSError(f"the pyacc cache key {path} is too short ({len(data)} bytes): delete "
                      "it (a new one is made) or point PYACC_CACHE_KEY at a valid key file")
    return data


def sign(content: bytes) -> bytes:
    """The HMAC-SHA256 tag of ``content`` under the key."""
    return hmac.new(key(), content, hashlib.sha256).digest()


def _valid(content: bytes, tag: bytes) -> bool:
    return hmac.compare_digest(sign(content), tag)


# -- text artifacts (generated modules) ------------------------------------------------------
def signed_text(text: str) -> str:
    """``text`` with its signature line appended (line numbers before it unchanged)."""
    body = text if text.endswith("\n") else text + "\n"
    return body + _SIGNATURE_LINE + sign(body.encode()).hex() + "\n"


def verified_text(path: Path) -> str | None:
    """The content of a signed text file before its signature line, or None (with one
    warning naming the file) when the file is unreadable, unsigned or altered."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        warn_once(path, f"pyacc: the cached file {path} cannot be read ({error}); it is not "
                        "used and is made again")
        return None
    body, _, last = text.rstrip("\n").rpartition("\n")
    body += "\n"
    if last.startswith(_SIGNATURE_LINE):
        try:
            if _valid(body.encode(), bytes.fromhex(last[len(_SIGNATURE_LINE):])):
                return body
        except ValueError:  # not hex
            pass
    _refuse(path)
    return None


def _refuse(path) -> None:
    warn_once(path, f"pyacc: the cached file {path} was not written by pyacc for this user "
                    "(its signature is missing or wrong: altered, truncated, or from another "
                    "user's cache); it is not used, and is made again. To share a cache "
                    f"between users on purpose, point {KEY_ENVIRONMENT} at one key file")


# -- binary artifacts ---------------------------------------------------------------------------
def signed_bytes(content: bytes) -> bytes:
    return MAGIC + sign(content) + content


def verified_bytes(data: bytes, path) -> bytes | None:
    """The content of a signed binary artifact, or None (one warning naming ``path``)."""
    head = len(MAGIC) + _TAG_BYTES
    if data.startswith(MAGIC) and len(data) >= head:
        content = data[head:]
        if _valid(content, data[len(MAGIC):head]):
            return content
    _refuse(path)
    return None


# -- folders ------------------------------------------------------------------------------------
def private_folder(path: Path) -> Path:
    """Create ``path`` (and missing parents) ``0700``; warn once when an existing one is
    writable by others (group or world, no sticky bit) or owned by another user."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:  # a file where a folder should be: the caller's write fails
        return path
    _check_folder(path)
    return path


def _check_folder(path: Path) -> None:
    try:
        info = path.stat()
    except OSError:
        return
    problems = []
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        problems.append(f"it belongs to user id {info.st_uid}, not to you")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        problems.append(f"others can write it (mode {stat.filemode(info.st_mode)})")
    if problems:
        warn_once(path, f"pyacc: the cache folder {path} is not private: {'; '.join(problems)}. "
                        "pyacc uses only the files in it that it signed for you, but make it "
                        f"yours alone (chmod go-w {path}) or choose another PYACC_CACHE_DIR")


# -- Numba's cache files ---------------------------------------------------------------------
_SIGNING_CLASSES: dict[type, type] = {}


def sign_dispatcher_cache(dispatcher) -> bool:
    """Make the on-disk cache of a Numba-style dispatcher (Numba's CPU dispatcher,
    numba-cuda's, numba-cuda-mlir's) sign what it writes and refuse what it did not sign.
    True when the dispatcher has such a cache."""
    cache = getattr(dispatcher, "_cache", None)
    cache_file = getattr(cache, "_cache_file", None)
    if cache_file is None or not hasattr(cache_file, "_load_index"):
        return False
    base = type(cache_file)
    if getattr(base, "_pyacc_signed", False):
        return True
    signing = _SIGNING_CLASSES.get(base)
    if signing is None:
        signing = _SIGNING_CLASSES[base] = type(f"Signed{base.__name__}", (_SignedCacheFile, base),
                                                {"_pyacc_signed": True})
    cache_file.__class__ = signing
    return True


class _SignedCacheFile:
    """Mixed in before a library's ``IndexDataCacheFile``: every file it writes is
    signed (:data:`MAGIC`, tag, content), and a file that fails the check is absent
    (the index is empty, the data entry missing: the library compiles again and saves
    over it). Mirrors the library's own ``_load_index``/``_load_data``, which it must
    not call: they unpickle before any check."""

    @contextlib.contextmanager
    def _open_for_write(self, filepath):
        buffer = io.BytesIO()
        yield buffer
        with super()._open_for_write(filepath) as out:
            out.write(signed_bytes(buffer.getvalue()))

    def _verified(self, path):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            warn_once(path, f"pyacc: the cached file {path} cannot be read ({error}); it is not used")
            return None
        return verified_bytes(data, path)

    def _load_index(self):
        content = self._verified(self._index_path)
        if content is None:
            return {}
        try:
            stream = io.BytesIO(content)
            version = pickle.load(stream)
            if version != self._version:
                return {}
            stamp, overloads = pickle.loads(stream.read())
        except Exception:  # noqa: BLE001 - signed but unreadable: another pyacc's format
            return {}
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, name):
        path = self._data_path(name)
        content = self._verified(path)
        if content is None:
            raise OSError(f"{path} is not a cache file pyacc signed")  # load() returns None
        return pickle.loads(content)
