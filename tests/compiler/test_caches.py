"""The cache key, signed artifacts and private folders (``pyacc.compiler.caches``; issue
32: the kernel caches are code, and only files pyacc wrote for this user may run)."""
from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from pyacc.compiler import caches


@pytest.fixture(autouse=True)
def own_key(tmp_path, monkeypatch):
    """Each test its own key file and warning memory."""
    monkeypatch.setenv(caches.KEY_ENVIRONMENT, str(tmp_path / "keys" / "cache.key"))
    monkeypatch.setattr(caches, "_keys", {})
    monkeypatch.setattr(caches, "_warned", set())


def test_the_key_is_made_once_readable_by_its_user_only(tmp_path):
    first = caches.key()
    path = caches.key_path()
    assert len(first) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    caches._keys.clear()
    assert caches.key() == first  # read back, not made again


def test_the_default_key_lives_in_the_users_config_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(caches.KEY_ENVIRONMENT)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert caches.key_path() == tmp_path / "config" / "pyacc" / "cache.key"


def test_two_processes_making_the_key_at_once_agree(tmp_path):
    code = ("import sys; sys.path.insert(0, %r); from pyacc.compiler import caches; "
            "print(caches.key().hex())") % os.getcwd()
    env = dict(os.environ, PYACC_CACHE_KEY=str(tmp_path / "race" / "cache.key"))
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             text=True) for _ in range(4)]
    keys = {run.communicate(timeout=120)[0].strip() for run in runs}
    assert len(keys) == 1 and len(keys.pop()) == 64


def test_a_key_file_appears_only_whole(tmp_path, monkeypatch):
    # The race of the test above, made certain: while the key's bytes are being made, no
    # key file may exist yet (another process would read it empty and fail).
    path = tmp_path / "whole" / "cache.key"
    monkeypatch.setenv("PYACC_CACHE_KEY", str(path))
    monkeypatch.setattr(caches, "_keys", {})
    made = caches.secrets.token_bytes

    def token_bytes(count):
        assert not path.exists(), "the key file was visible before its content was written"
        return made(count)

    monkeypatch.setattr(caches.secrets, "token_bytes", token_bytes)
    assert len(caches.key()) == 32 and path.read_bytes() == caches.key()
    assert [p.name for p in path.parent.iterdir()] == ["cache.key"]  # no temporary left


def test_a_signed_text_reads_back_and_keeps_its_line_numbers(tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text(caches.signed_text("a = 1\nb = 2\n", "kernel.py"))
    assert caches.verified_text(path) == "a = 1\nb = 2\n"
    assert path.read_text().splitlines()[:2] == ["a = 1", "b = 2"]


@pytest.mark.parametrize("damage", [
    lambda text: 'print("CODE FROM THE CACHE DIR RAN")\n' + text,   # a line planted
    lambda text: text.replace("b = 2", "b = 3"),                      # content changed
    lambda text: text.rsplit("\n", 2)[0] + "\n",                      # signature removed
    lambda text: text[:5],                                            # truncated
    lambda text: "",                                                  # emptied
    lambda text: text.replace("pyacc-signature: ", "pyacc-signature: zz"),  # garbage tag
])
def test_an_altered_text_is_refused_once_naming_the_file(tmp_path, damage):
    path = tmp_path / "kernel.py"
    path.write_text(damage(caches.signed_text("a = 1\nb = 2\n", "kernel.py")))
    with pytest.warns(caches.CacheTrustWarning, match=str(path)):
        assert caches.verified_text(path) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert caches.verified_text(path) is None  # once per file


def test_a_signed_file_under_another_name_is_refused(tmp_path):
    """The signature covers the file name: a signed module (or Numba file) copied over
    another's name is refused, so no kernel's code runs as another kernel."""
    (tmp_path / "fill_a.py").write_text(caches.signed_text("x = 1\n", "fill_a.py"))
    (tmp_path / "fill_b.py").write_text((tmp_path / "fill_a.py").read_text())
    assert caches.verified_text(tmp_path / "fill_a.py") == "x = 1\n"
    with pytest.warns(caches.CacheTrustWarning, match="fill_b.py"):
        assert caches.verified_text(tmp_path / "fill_b.py") is None
    data = caches.signed_bytes(b"record", "a.nbc")
    assert caches.verified_bytes(data, tmp_path / "a.nbc") == b"record"
    assert caches.verified_bytes(data, tmp_path / "b.nbc") is None


def test_a_link_planted_in_the_cache_folder_never_redirects_a_write(tmp_path):
    """Temporary files get random names, created exclusively: a symbolic link planted
    under any name pyacc could predict is left alone, and its target untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    folder = caches.private_folder(tmp_path / "kernels")
    path = folder / "k.py"
    for planted in (folder / f".k.py.{os.getpid()}.0.tmp", folder / f".crossover.signed.{os.getpid()}.tmp"):
        planted.symlink_to(victim)
    assert caches.write_module(path, "x = 1\n", replace=False)
    assert victim.read_text() == "mine"
    assert caches.read_module(path) == "x = 1\n"
    assert sorted(p.name for p in folder.iterdir() if not p.is_symlink()) == ["k.py"]


def test_another_users_key_signs_nothing_of_yours(tmp_path, monkeypatch):
    path = tmp_path / "kernel.py"
    path.write_text(caches.signed_text("a = 1\n", "kernel.py"))
    monkeypatch.setenv(caches.KEY_ENVIRONMENT, str(tmp_path / "theirs" / "cache.key"))
    with pytest.warns(caches.CacheTrustWarning):
        assert caches.verified_text(path) is None


def test_folders_pyacc_makes_are_private(tmp_path):
    folder = caches.private_folder(tmp_path / "a" / "b")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_folder_others_can_write_is_named_once_with_the_fix(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.warns(caches.CacheTrustWarning, match=r"others can write it .*chmod go-w"):
        caches.private_folder(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caches.private_folder(folder)


def test_a_sticky_shared_folder_is_not_reported(tmp_path):
    folder = tmp_path / "scratch"
    folder.mkdir()
    folder.chmod(0o1777)  # like /tmp: others cannot replace your files
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caches.private_folder(folder)


# -- Numba's own cache files --------------------------------------------------------------
_MODULE = textwrap.dedent("""
    import numba

    @numba.njit(cache=False)
    def twice(x):
        return 2 * x
""")


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dispatcher = module.twice
    dispatcher.enable_caching()
    assert caches.sign_dispatcher_cache(dispatcher)
    return dispatcher


def _cache_files(folder):
    return sorted(p for p in (folder / "__pycache__").iterdir() if p.suffix in (".nbi", ".nbc"))


def test_numbas_cache_files_are_signed_and_loaded_back(tmp_path):
    path = tmp_path / "signed_kernels.py"
    path.write_text(_MODULE)
    assert _load(path, "signed_a")(3.0) == 6.0
    files = _cache_files(tmp_path)
    assert files and all(f.read_bytes().startswith(caches.MAGIC) for f in files)
    again = _load(path, "signed_b")  # as a second process would
    assert again(3.0) == 6.0 and again.stats.cache_hits


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_an_altered_numba_cache_file_is_never_unpickled(tmp_path, suffix):
    path = tmp_path / "planted_kernels.py"
    path.write_text(_MODULE)
    _load(path, "planted_a")(3.0)
    target = next(f for f in _cache_files(tmp_path) if f.suffix == suffix)
    # a pickle that would run code if loaded
    target.write_bytes(b"cos\nsystem\n(S'echo PICKLE RAN > %s'\ntR." % str(tmp_path / "ran").encode())
    with pytest.warns(caches.CacheTrustWarning, match=target.name):
        again = _load(path, "planted_b")
        assert again(3.0) == 6.0  # compiled again
    assert not (tmp_path / "ran").exists() and not again.stats.cache_hits
    assert _cache_files(tmp_path) and all(
        f.read_bytes().startswith(caches.MAGIC) for f in _cache_files(tmp_path))  # saved over


def test_signing_is_idempotent_and_shared_per_class(tmp_path):
    path = tmp_path / "twice_kernels.py"
    path.write_text(_MODULE)
    dispatcher = _load(path, "twice_a")
    kind = type(dispatcher._cache._cache_file)
    assert caches.sign_dispatcher_cache(dispatcher) and type(dispatcher._cache._cache_file) is kind
    assert np.isclose(dispatcher(2.0), 4.0)


# -- the GPU compilers' cache files ----------------------------------------------------------
def _installed_cuda_compilers():
    from pyacc.compiler import cuda_compilers
    return [pytest.param(c, id=name) for name, c in cuda_compilers.COMPILERS.items()
            if c.installed()]


_GPU_MODULE = "def fill(a):\n    a[0] = 1\n"


@pytest.mark.parametrize("compiler", _installed_cuda_compilers())
def test_the_gpu_compilers_cache_files_are_signed_too(tmp_path, compiler):
    """numba-cuda's and numba-cuda-mlir's dispatchers cache like Numba's: the same signing
    applies, a record written reads back, an altered one is absent (no GPU needed: the
    cache file is exercised directly, as the dispatcher would on a GPU)."""
    from pyacc.compiler import cuda_compilers
    path = tmp_path / "gpu_kernels.py"
    path.write_text(_GPU_MODULE)
    spec = importlib.util.spec_from_file_location("gpu_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dispatcher = cuda_compilers.load(compiler).jit(cache=True)(module.fill)
    assert caches.sign_dispatcher_cache(dispatcher)
    cache_file = dispatcher._cache._cache_file
    assert cache_file._index_name.endswith(".pyacc.nbi")
    cache_file.save(("sig", "target"), {"code": b"\x00cubin"})
    assert cache_file.load(("sig", "target")) == {"code": b"\x00cubin"}
    index = tmp_path / "__pycache__" / cache_file._index_name
    assert index.read_bytes().startswith(caches.MAGIC)
    index.write_bytes(index.read_bytes()[:-1] + b"!")
    with pytest.warns(caches.CacheTrustWarning, match=cache_file._index_name):
        assert cache_file.load(("sig", "target")) is None


@pytest.mark.parametrize("mode", [0o644, 0o620, 0o602])
def test_a_key_others_can_read_or_write_is_named_with_the_fix(tmp_path, mode):
    caches.key()
    path = caches.key_path()
    path.chmod(mode)
    caches._keys.clear()
    with pytest.warns(caches.CacheTrustWarning, match=r"chmod 600 .*cache\.key"):
        caches.key()


def test_a_key_shared_on_purpose_may_be_read_by_its_group(tmp_path):
    caches.key()
    caches.key_path().chmod(0o640)  # PYACC_CACHE_KEY is set by the fixture: shared on purpose
    caches._keys.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caches.key()
