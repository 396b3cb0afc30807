"""The kernel cache runs only what pyacc wrote for this user, and survives damage (issue
32): every case runs real processes on a real cache folder, as a user's later runs would."""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import resource
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

KERNELS = textwrap.dedent('''
    def dot(x, y):
        s = 0.0
        for i in range(x.shape[0]):
            s += x[i] * y[i]
        return s
''')

SCRIPT = textwrap.dedent('''
    import json, sys, warnings
    sys.path.insert(0, {folder!r})
    warnings.simplefilter("always")
    import numpy as np
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        from pyacc.compiler import analyze, get_kernel, parse_clauses
        from cache_trust_kernels import dot
        x = np.arange(1000.0)
        kernel = get_kernel(analyze(dot, parse_clauses("parallel_loop", reduction="+:s")), (x, x))
        value = kernel(x, x)
    stats = getattr(kernel, "stats", None)
    print(json.dumps({{"value": value, "hits": sum(stats.cache_hits.values()) if stats else 0,
                      "warnings": [f"{{w.category.__name__}}: {{w.message}}" for w in seen
                                   if "pyacc" in str(w.message)]}}))
''')
EXPECTED = float(sum(i * i for i in range(1000)))


def _env(tmp_path, cache, **extra):
    env = dict(os.environ, PYACC_CACHE_DIR=str(cache),
               PYACC_CACHE_KEY=str(tmp_path / "config" / "cache.key"))
    env.update(extra)
    return env


def _run(tmp_path, cache, *, preexec=None, **extra):
    (tmp_path / "cache_trust_kernels.py").write_text(KERNELS)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(folder=str(tmp_path))],
                         cwd=ROOT, env=_env(tmp_path, cache, **extra), capture_output=True,
                         text=True, preexec_fn=preexec)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["value"] == EXPECTED
    return result


def _module(cache) -> Path:
    (found,) = (cache / "kernels").glob("dot_*.py")
    return found


def _signed_and_clean(cache):
    """The cache holds signed modules, signed Numba files, nothing half-written."""
    kernels = cache / "kernels"
    assert _module(cache).read_text().splitlines()[-1].startswith("# pyacc-signature: ")
    assert not [p for p in kernels.rglob("*") if ".tmp" in p.name]
    assert not list(kernels.rglob("*.pyc"))  # modules are never imported
    numba_files = [p for p in (kernels / "__pycache__").iterdir() if p.suffix in (".nbi", ".nbc")]
    assert numba_files and all(p.read_bytes().startswith(b"PYACCSIG1\n") for p in numba_files)


def test_a_line_added_to_a_cached_module_never_runs(tmp_path):
    cache = tmp_path / "cache"
    assert _run(tmp_path, cache)["warnings"] == []
    module = _module(cache)
    original = module.read_text()
    marker = tmp_path / "ran"
    module.write_text(f"open({str(marker)!r}, 'w').write('CODE FROM THE CACHE DIR RAN')\n"
                      + original)
    result = _run(tmp_path, cache)
    assert not marker.exists()
    (warning,) = result["warnings"]
    assert "CacheTrustWarning" in warning and str(module) in warning
    assert module.read_text() == original  # made again and stored over the altered one
    again = _run(tmp_path, cache)
    assert again["warnings"] == [] and again["hits"] == 1
    _signed_and_clean(cache)


@pytest.mark.parametrize("kind", ["unsigned", "signed with another key"])
def test_a_module_planted_under_a_name_pyacc_computes_never_runs(tmp_path, kind):
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    module = _module(cache)
    marker = tmp_path / "ran"
    planted = f"open({str(marker)!r}, 'w').write('planted')\n{KERNELS}\n_acc_kernel = dot\n"
    if kind != "unsigned":  # another user's (or an attacker's) key signs nothing of yours
        other = tmp_path / "other.key"
        other.write_bytes(os.urandom(32))
        planted = subprocess.run(
            [sys.executable, "-c", "import sys; from pyacc.compiler import caches; "
             f"sys.stdout.write(caches.signed_text(sys.stdin.read(), {module.name!r}))"],
            input=planted, cwd=ROOT, env=dict(os.environ, PYACC_CACHE_KEY=str(other)),
            capture_output=True, text=True, check=True).stdout
    module.unlink()
    for numba_file in (cache / "kernels" / "__pycache__").iterdir():
        numba_file.unlink()
    module.write_text(planted)
    result = _run(tmp_path, cache)
    assert not marker.exists()
    assert len(result["warnings"]) == 1 and str(module) in result["warnings"][0]
    _signed_and_clean(cache)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage", "unreadable"])
def test_a_damaged_module_is_made_again_with_one_warning(tmp_path, damage):
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    module = _module(cache)
    text = module.read_text()
    if damage == "truncated":
        module.write_text(text[: len(text) // 2])
    elif damage == "empty":
        module.write_text("")
    elif damage == "garbage":
        module.write_bytes(os.urandom(300) + b"\xff\xfe")
    else:  # a folder where the file should be: unreadable, even for root
        module.unlink()
        module.mkdir()
    result = _run(tmp_path, cache)
    assert len(result["warnings"]) <= 1
    if damage != "unreadable":
        assert len(result["warnings"]) == 1 and str(module) in result["warnings"][0]
        assert module.read_text() == text
        _signed_and_clean(cache)


def test_an_altered_numba_cache_file_of_a_kernel_is_never_unpickled(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    marker = tmp_path / "unpickled"
    payload = b"cos\nsystem\n(S'touch %s'\ntR." % str(marker).encode()
    for numba_file in (cache / "kernels" / "__pycache__").iterdir():
        numba_file.write_bytes(payload)
    result = _run(tmp_path, cache)
    assert not marker.exists() and result["hits"] == 0
    assert result["warnings"] and all("CacheTrustWarning" in w for w in result["warnings"])
    assert _run(tmp_path, cache)["hits"] == 1  # saved over, signed
    _signed_and_clean(cache)


def test_pickle_payload_used_above_would_run_if_unpickled(tmp_path):
    """The planted payload is live: the test above would fail if it were loaded."""
    marker = tmp_path / "unpickled"
    pickle.loads(b"cos\nsystem\n(S'touch %s'\ntR." % str(marker).encode())
    assert marker.exists()


def test_a_cache_folder_others_can_write_is_named_with_the_fix(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    kernels = cache / "kernels"
    kernels.chmod(0o777)
    (warning,) = _run(tmp_path, cache)["warnings"]
    assert str(kernels) in warning and "chmod go-w" in warning


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder away needs root")
def test_a_cache_folder_another_user_owns_is_named(tmp_path):
    cache = tmp_path / "cache"
    _run(tmp_path, cache)
    os.chown(cache / "kernels", 65534, 65534)
    (warning,) = _run(tmp_path, cache)["warnings"]
    assert str(cache / "kernels") in warning and "user id 65534" in warning


def test_folders_pyacc_makes_for_the_cache_are_private(tmp_path):
    cache = tmp_path / "deep" / "cache"
    _run(tmp_path, cache)
    for folder in (tmp_path / "deep", cache, cache / "kernels", cache / "kernels" / "__pycache__"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_cache_folder_that_cannot_be_made_compiles_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = _run(tmp_path, blocker / "cache")
    (warning,) = result["warnings"]
    assert "compiled in memory" in warning and "PYACC_CACHE_DIR" in warning


@contextlib.contextmanager
def _read_only(*folders):
    """Folders no one of this user can write: ``chmod a-w``, or for root (whom modes do
    not stop) the immutable attribute."""
    if os.geteuid() != 0:
        for folder in folders:
            folder.chmod(0o555)
        try:
            yield
        finally:
            for folder in folders:
                folder.chmod(0o700)
        return
    made = [f for f in folders
            if subprocess.run(["chattr", "+i", str(f)], capture_output=True).returncode == 0]
    try:
        if len(made) < len(folders):
            pytest.skip("root cannot make a read-only folder here (chattr +i refused)")
        yield
    finally:
        for folder in made:
            subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.mark.parametrize("warm", [False, True], ids=["empty", "warm"])
def test_a_read_only_cache_folder_still_runs_right(tmp_path, warm):
    cache = tmp_path / "cache"
    if warm:
        _run(tmp_path, cache)
    else:
        (cache / "kernels" / "__pycache__").mkdir(parents=True)
    kernels = cache / "kernels"
    before = sorted(p.name for p in kernels.rglob("*"))
    with _read_only(kernels, kernels / "__pycache__"):
        result = _run(tmp_path, cache, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert len(result["warnings"]) <= 1
    if not warm:
        (warning,) = result["warnings"]
        assert "cannot write the kernel cache" in warning and str(kernels) in warning
    assert sorted(p.name for p in kernels.rglob("*")) == before


def _file_size_limit(limit):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.parametrize("limit", [300, 4000], ids=["module", "numba-data"])
def test_a_full_cache_folder_still_runs_right_and_leaves_nothing_half_written(tmp_path, limit):
    cache = tmp_path / "cache"
    result = _run(tmp_path, cache, preexec=_file_size_limit(limit))
    (warning,) = result["warnings"]
    assert "cannot write" in warning
    kernels = cache / "kernels"
    assert not [p for p in kernels.rglob("*") if ".tmp" in p.name]
    for file in kernels.rglob("*"):
        if file.is_file() and file.suffix == ".py":
            assert file.read_text().splitlines()[-1].startswith("# pyacc-signature: ")
    assert _run(tmp_path, cache)["value"] == EXPECTED  # and a later process is served


def test_processes_compiling_the_same_kernel_at_once_agree(tmp_path):
    cache = tmp_path / "cache"
    (tmp_path / "cache_trust_kernels.py").write_text(KERNELS)
    command = [sys.executable, "-c", SCRIPT.format(folder=str(tmp_path))]
    runs = [subprocess.Popen(command, cwd=ROOT, env=_env(tmp_path, cache),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(4)]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["value"] == EXPECTED and result["warnings"] == []
    _signed_and_clean(cache)
    assert _run(tmp_path, cache)["hits"] == 1


def test_sharing_a_cache_between_users_takes_one_key_file(tmp_path):
    # the serial crossover set, so that no run measures it: a measurement on a busy
    # machine is not recorded, which would leave the other user's record in the folder
    cache, fixed = tmp_path / "cache", {"PYACC_SERIAL_BELOW": "0"}
    _run(tmp_path, cache, **fixed)
    other_user = _run(tmp_path, cache, PYACC_CACHE_KEY=str(tmp_path / "other" / "cache.key"), **fixed)
    assert len(other_user["warnings"]) == 1  # not by accident
    _run(tmp_path, cache, **fixed)  # the first user's module again
    shared = _run(tmp_path, cache, **fixed)  # on purpose: the same PYACC_CACHE_KEY
    assert shared["warnings"] == [] and shared["hits"] == 1


def test_a_key_that_cannot_be_read_compiles_in_memory(tmp_path):
    bad = tmp_path / "short.key"
    bad.write_bytes(b"short")
    cache = tmp_path / "cache"
    result = _run(tmp_path, cache, PYACC_CACHE_KEY=str(bad))
    (warning,) = result["warnings"]
    assert "too short" in warning and "compiled in memory" in warning
    assert not (cache / "kernels").exists() or not list((cache / "kernels").glob("*.py"))
