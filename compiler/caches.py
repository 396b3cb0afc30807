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
  ``$XDG_CONFIG_HOME`` or ``~/.config``), created ``0600`` on first use (written whole to a temporary file, then linked
  into place: two processes creating it at once agree on one key, and neither ever
  reads a half-written key).
- **Signed artifacts**, an HMAC-SHA256 of their file name and content under the key (a
  signed file copied over another's name is refused too):
  generated modules end with one line ``# pyacc-signature: <hex>`` over the text before
  it (:func:`signed_text`, :func:`verified_text`); Numba's cache files (index ``.nbi``,
  data ``.nbc``, named ``*.pyacc.nbi``/``*.pyacc.<n>.nbc``) of pyacc's dispatchers start
  with :data:`MAGIC` and the tag
  (:func:`sign_dispatcher_cache` swaps the dispatcher's cache-file object for a signing
  subclass of its own class: Numba's, numba-cuda's and numba-cuda-mlir's share that
  design); small records (the serial crossover) and GPU kernel binaries through
  :func:`replace_signed` / :func:`verified_bytes`.
- **A file whose signature is missing or wrong**, truncated, empty, unreadable or
  garbage is never imported, unpickled or believed: it counts as absent (the caller
  regenerates it, and replaces it where the folder is writable); the first such file of a
  process is named in a :class:`CacheTrustWarning`, later ones on the ``pyacc.cache``
  logger (another user's cache refuses many files at once).
- **Folders** pyacc creates are ``0700`` (:func:`private_folder`); an existing folder
  that others can write (group or world, without the sticky bit) or that another user
  owns gets one warning naming it and the fix.

Invariants: a file's content is verified before any of it is executed or unpickled;
the key itself never appears in the environment or a message; a cached module is
stored whole or not at all (:func:`write_module`), through a temporary file of a random
name created exclusively (:func:`temporary`: no planted link redirects a write); warnings are given once per path and
process, refusals once per process.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import logging
import os
import pickle
import secrets
import stat
import sys
import tempfile
import threading
import warnings
from pathlib import Path

__all__ = ["cache_dir", "CacheTrustWarning", "refuse", "KEY_ENVIRONMENT", "MAGIC", "key", "key_path", "sign",
           "signed_text", "verified_text", "read_module", "write_module",
           "signed_bytes", "verified_bytes", "replace_signed", "temporary",
           "private_folder", "sign_dispatcher_cache", "warn_once"]

#: the setting that names a key file (sharing a cache between users on purpose)
KEY_ENVIRONMENT = "PYACC_CACHE_KEY"
#: what a signed binary artifact starts with (then the 32-byte tag, then the content)
MAGIC = b"PYACCSIG1\n"
_TAG_BYTES = 32
_SIGNATURE_LINE = "# pyacc-signature: "

_lock = threading.RLock()  # key() warns (warn_once) while holding it
_keys: dict[str, bytes] = {}
_warned: set = set()
_REFUSED = "<a cached file was refused>"  # in _warned once one was
_LOG = logging.getLogger("pyacc.cache")


class CacheTrustWarning(UserWarning):
    """A cached file pyacc did not write for this user (or a cache folder others can
    write) was found; the file is not used."""


def warn_once(path, message: str) -> None:
    """One :class:`CacheTrustWarning` per path and process."""
    with _lock:
        if str(path) in _warned:
            return
        _warned.add(str(path))
    warnings.warn(message, CacheTrustWarning, stacklevel=_stacklevel())


def refuse(path, why: str) -> None:
    """Report a cached file that is not used: the first of a process as a
    :class:`CacheTrustWarning`, every later one on the ``pyacc.cache`` logger (another
    user's cache refuses many files at once: one warning says it)."""
    message = f"pyacc: the cached file {path} {why}; it is not used, and is made again"
    with _lock:
        first = _REFUSED not in _warned
        _warned.add(_REFUSED)
    if first:
        warn_once(path, message + " (further refused files are logged on the 'pyacc.cache' "
                                  "logger)")
    else:
        _LOG.warning("%s", message)


#: pyacc's folders (installed, ``pyacc/`` holds the others; in a checkout, side by side)
_OWN = tuple(str(folder) + os.sep for folder in (
    Path(__file__).parent, Path(__file__).parent.parent / "pyacc",
    Path(__file__).parent.parent / "mapping"))


def _stacklevel() -> int:
    """The ``stacklevel`` that blames the user's line: the first frame outside pyacc and
    the compiler libraries (Numba's cache calls back into this module)."""
    libraries = _OWN + tuple(os.path.dirname(getattr(module, "__file__", "") or "//") + os.sep
                             for module in map(sys.modules.get, ("numba", "numba_cuda"))
                             if module is not None)
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(libraries):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


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
        _create_key(path)
    data = path.read_bytes()
    if len(data) < 16:
        raise OSError(f"the pyacc cache key {path} is too short ({len(data)} bytes): delete "
                      "it (a new one is made) or point PYACC_CACHE_KEY at a valid key file")
    _check_key(path)
    return data


def _create_key(path: Path) -> None:
    """Make a new key at ``path``, whole or not at all: the key is written to a private
    temporary file beside it and linked into place, so another process never reads a key
    file half-written; when another process links first, theirs is kept."""
    private_folder(path.parent)
    written = temporary(path, secrets.token_bytes(_TAG_BYTES))
    try:
        os.link(written, path)
    except FileExistsError:  # another process made it first: use theirs
        pass
    finally:
        written.unlink()


def _check_key(path: Path) -> None:
    """Warn once when others could learn or replace the key (then they could sign a file):
    a key anyone may read or another user may write; a group may read only a key named
    by ``$PYACC_CACHE_KEY`` (a cache shared on purpose)."""
    info = path.stat()
    shared = bool(os.environ.get(KEY_ENVIRONMENT, "").strip())
    readable = stat.S_IROTH | (0 if shared else stat.S_IRGRP)
    if info.st_mode & (readable | stat.S_IWGRP | stat.S_IWOTH):
        warn_once(path, f"pyacc: the cache key {path} can be read or written by others (mode "
                        f"{stat.filemode(info.st_mode)}), who could then sign cached code that "
                        f"your programs run: chmod 600 {path} (a key shared on purpose through "
                        f"{KEY_ENVIRONMENT}: chmod 640, group members only)")


def sign(content: bytes, name: str) -> bytes:
    """The HMAC-SHA256 tag of ``content`` stored under the file name ``name`` (a base
    name), under the key: a signed file copied over another's name is refused too."""
    return hmac.new(key(), name.encode() + b"\0" + content, hashlib.sha256).digest()


def _valid(content: bytes, name: str, tag: bytes) -> bool:
    return hmac.compare_digest(sign(content, name), tag)


# -- text artifacts (generated modules) ------------------------------------------------------
def signed_text(text: str, name: str) -> str:
    """``text``, to be stored as the file ``name``, with its signature line appended
    (line numbers before it unchanged)."""
    body = text if text.endswith("\n") else text + "\n"
    return body + _SIGNATURE_LINE + sign(body.encode(), name).hex() + "\n"


def verified_text(path: Path) -> str | None:
    """The content of a signed text file before its signature line, or None (with one
    warning naming the file) when the file is unreadable, unsigned or altered."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        refuse(path, f"cannot be read ({error})")
        return None
    body, _, last = text.rstrip("\n").rpartition("\n")
    body += "\n"
    if last.startswith(_SIGNATURE_LINE):
        try:
            if _valid(body.encode(), path.name, bytes.fromhex(last[len(_SIGNATURE_LINE):])):
                return body
        except ValueError:  # not hex
            pass
    _refuse(path)
    return None


def _refuse(path) -> None:
    refuse(path, "was not written by pyacc for this user (its signature is missing or "
                 "wrong: altered, truncated, or from another user's cache). To share a "
                 f"cache between users on purpose, point {KEY_ENVIRONMENT} at one key file")


# -- generated modules -------------------------------------------------------------------------
def read_module(path: Path) -> str | None:
    """The text of the cached module at ``path`` (its signature checked), or None when
    there is none or it is refused (:func:`verified_text` warns)."""
    if not path.exists():
        return None
    return verified_text(path)


def write_module(path: Path, text: str, *, replace: bool) -> bool:
    """Store ``text``, signed, at ``path``; never half-written: a temporary file is
    linked into place (keeping a file another process stored meanwhile: the same text,
    so Numba's cache index of it stays fresh) or, with ``replace``, put over a refused
    one. False when it cannot be written (read-only, full, over quota), with one warning
    naming the folder unless ``replace`` (the refused file was named already): the
    caller then runs the module from memory."""
    tmp = None
    try:
        tmp = temporary(path, signed_text(text, path.name).encode())
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # atomic; fails when the name is taken
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
        return True
    except OSError as error:
        if replace:
            return False
        warn_once(path.parent, f"pyacc: cannot write the kernel cache {path.parent} ({error}); "
                               "kernels are compiled in memory, and again in the next "
                               "process. Free space there or set PYACC_CACHE_DIR to a "
                               "folder you can write")
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def temporary(path: Path, data: bytes) -> Path:
    """A new file beside ``path`` holding ``data``, for an atomic rename or link into
    place: a random name made with ``O_EXCL | O_NOFOLLOW`` (``tempfile.mkstemp``, mode
    0600), so that nobody who can write the folder can plant a link there that would
    make pyacc write elsewhere. The caller removes it."""
    descriptor, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


# -- binary artifacts ---------------------------------------------------------------------------
def signed_bytes(content: bytes, name: str) -> bytes:
    """``content`` signed, to be stored as the file ``name``."""
    return MAGIC + sign(content, name) + content


def replace_signed(path: Path, content: bytes) -> None:
    """Store ``content`` signed at ``path``, whole or not at all: a temporary file
    (:func:`temporary`) renamed over whatever is there. Raises ``OSError`` when it cannot
    be written; no temporary file is left behind."""
    tmp = temporary(path, signed_bytes(content, path.name))
    try:
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()  # (gone already when the rename succeeded)


def verified_bytes(data: bytes, path) -> bytes | None:
    """The content of a signed binary artifact read from ``path``, or None (one warning
    naming ``path``)."""
    head = len(MAGIC) + _TAG_BYTES
    if data.startswith(MAGIC) and len(data) >= head:
        content = data[head:]
        if _valid(content, os.path.basename(path), data[len(MAGIC):head]):
            return content
    _refuse(path)
    return None


# -- folders ------------------------------------------------------------------------------------
def private_folder(path: Path) -> Path:
    """Create ``path`` and its missing parents ``0700``; warn once when an existing one is
    writable by others (group or world, no sticky bit) or owned by another user."""
    path = Path(path)
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    try:
        for folder in reversed(missing):  # every folder made here is private, parents too
            folder.mkdir(mode=0o700, exist_ok=True)
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
    _rename(cache_file)
    return True


def _rename(cache_file) -> None:
    """``<base>.pyacc.nbi`` / ``<base>.pyacc.<n>.nbc``: a signed file never takes the name
    of one the library writes unsigned (a stale one is not reported; the library never
    opens a signed one)."""
    for attribute, suffix in (("_index_name", ".nbi"), ("_data_name_pattern", ".{number:d}.nbc")):
        name = getattr(cache_file, attribute, None)
        if isinstance(name, str) and name.endswith(suffix) and ".pyacc" not in name:
            setattr(cache_file, attribute, name[:-len(suffix)] + ".pyacc" + suffix)
    cache_file._index_path = os.path.join(cache_file._cache_path, cache_file._index_name)


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
            out.write(signed_bytes(buffer.getvalue(), os.path.basename(filepath)))

    def save(self, key, data):
        try:
            super().save(key, data)
        except OSError as error:  # a full or read-only folder: the code still runs
            warn_once(self._cache_path, f"pyacc: cannot write Numba's cache in {self._cache_path} "
                                        f"({error}); kernels are compiled again in the next process")

    def _verified(self, path):
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            refuse(path, f"cannot be read ({error})")
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
