"""The cuda target's tests. ``test_simulated_*.py`` need Numba's CUDA simulator, which
is chosen when numba.cuda is first imported: they are collected only in a process
started with ``NUMBA_ENABLE_CUDASIM=1`` (``test_simulator_run.py`` starts one)."""
import os

SIMULATED = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")

collect_ignore_glob = [] if SIMULATED else ["test_simulated_*.py"]
if SIMULATED:  # the other files run in the ordinary test process
    collect_ignore_glob += ["test_cuda_ptx.py", "test_cuda_plans.py", "test_cuda_binaries.py", "test_simulator_run.py",
                            "test_launch_record.py", "test_relaunch.py", "test_relaunch_async.py"]
