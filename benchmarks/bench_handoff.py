"""The handoff to a queue's worker thread, step by step (issue 30: "the handoff itself
cheaper where work does go to a worker: measure each step").

When async work goes to a queue's thread (``mapping/queues.py``, ``WorkerQueue``: work
predicted longer than the inline crossover, or behind queued work), one operation costs:

1. ``submit`` on the calling thread: the queue's lock, the append, and — only when the
   worker sleeps — the ``notify`` that wakes it (measured both ways: with the worker
   held, so that nothing wakes, and with it asleep);
2. the wake-up: from ``submit`` returning to the operation starting on the worker
   (the OS scheduling the worker thread; the worker takes the lock to pop);
3. the completion: from the operation's end to a waiting host thread's ``wait``
   returning (the worker takes the lock again, counts it, notifies the waiter);
4. the round trip, ``submit`` + ``synchronize`` of a no-op, and ``synchronize`` of an idle
   queue (a check).

Each step is timed with ``time.perf_counter_ns`` stamps taken by the operation itself on
the worker, medians over many round trips, on a queue made without the inline crossover
(every operation goes to the worker). Run: ``python benchmarks/bench_handoff.py [--smoke]
[--json F]``; ``--smoke`` runs 20 round trips and checks nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from pyacc.mapping.queues import WorkerQueue

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runtime import machine_description  # noqa: E402


def _stamp(into: list):
    """A no-op operation that records when it started and ended on the worker."""
    def operation():
        into.append(time.perf_counter_ns())
        into.append(time.perf_counter_ns())
    return operation


def steps(rounds: int) -> dict:
    """µs per step (module docstring), medians over ``rounds`` round trips."""
    queue = WorkerQueue(1, "benchmark", inline_below=0.0)
    submit_asleep, wake, finish, round_trip, idle = [], [], [], [], []
    try:
        for _ in range(50):  # warm: the worker's first waits, the code paths
            queue.submit(_stamp([]))
            queue.synchronize()
        for _ in range(rounds):
            time.sleep(0.0002)  # the worker goes back to sleep
            stamps: list = []
            start = time.perf_counter_ns()
            queue.submit(_stamp(stamps))
            submitted = time.perf_counter_ns()
            queue.synchronize()
            returned = time.perf_counter_ns()
            submit_asleep.append(submitted - start)
            wake.append(stamps[0] - submitted)
            finish.append(returned - stamps[1])
            round_trip.append(returned - start)
            check = time.perf_counter_ns()
            queue.synchronize()
            idle.append(time.perf_counter_ns() - check)
        submit_held = []
        with queue.hold():  # nothing starts: each submit is the lock and the append only
            for _ in range(rounds):
                start = time.perf_counter_ns()
                queue.submit(_stamp([]))
                submit_held.append(time.perf_counter_ns() - start)
        queue.synchronize()
    finally:
        queue.close()
    median = lambda samples: statistics.median(samples) / 1e3  # noqa: E731 (ns -> µs)
    return {
        "submit, worker busy (lock + append)": median(submit_held),
        "submit, worker asleep (+ notify)": median(submit_asleep),
        "wake-up: submit returned -> operation starts": median(wake),
        "completion: operation ends -> wait returns": median(finish),
        "round trip: submit + synchronize of a no-op": median(round_trip),
        "synchronize of an idle queue": median(idle),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    rounds = 20 if args.smoke else 3000
    results = {"machine": machine_description(), "µs": steps(rounds)}
    print(f"machine: {results['machine']}\nhandoff to a queue's worker, µs (median of {rounds}):")
    for name, value in results["µs"].items():
        print(f"  {name:<46} {value:8.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
