"""PYACC_NOTIFY: one line per event on stderr, with the user's file:line (golden lines)."""

from .conftest import PROGRAM, run_program


def line_of(text: str) -> int:
    with open(PROGRAM) as source:
        for number, line in enumerate(source, 1):
            if text in line:
                return number
    raise AssertionError(text)


def pyacc_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pyacc: ")]


def test_notify_3_golden_lines_for_launches_and_transfers():
    _, stderr, _ = run_program(PYACC_NOTIFY=3)
    region, copyin, call = line_of("with acc.data("), line_of("acc.copyin(x)"), line_of("async_=1")
    kernel = line_of("def saxpy")
    here = f"file={PROGRAM}"

    def transfer(verb, line, queue, variable):
        return (f"pyacc: {verb} {here} line={line} function=main device=emulated:0 "
                f"queue={queue} variable={variable} bytes=800")

    def launch(queue):
        return (f"pyacc: launch kernel {here} line={kernel} function=saxpy device=emulated:0 "
                f"queue={queue} kernel=saxpy")

    assert pyacc_lines(stderr) == [
        transfer("upload", region, "sync", "x"),
        transfer("upload", region, "sync", "y"),
        launch("sync"),
        transfer("download", region, "sync", "y"),
        transfer("upload", copyin, "sync", "x"),
        transfer("upload", call, 1, "x"),
        transfer("upload", call, 1, "y"),
        launch(1),
        transfer("download", call, 1, "y"),
    ]


def test_notify_4_shows_counters_before_and_after_and_regions():
    _, stderr, _ = run_program(PYACC_NOTIFY=4)
    lines = pyacc_lines(stderr)
    region = line_of("with acc.data(")
    assert lines[0] == (f"pyacc: enter data file={PROGRAM} line={region} function=main "
                        "device=emulated:0 queue=sync variable=x bytes=800 "
                        + lines[0].split("bytes=800 ")[1])
    assert lines[0].endswith("structured=0->1 dynamic=0->0")
    assert any(line.startswith("pyacc: enter region") and "construct=data" in line for line in lines)
    assert any("construct=parallel_loop kernel=saxpy" in line for line in lines)
    copyin = [line for line in lines if f"line={line_of('acc.copyin(x)')}" in line]
    assert copyin and copyin[0].endswith("structured=0->0 dynamic=0->1")
    delete = [line for line in lines if f"line={line_of('acc.delete(x)')}" in line]
    assert delete and delete[0].endswith("structured=0->0 dynamic=1->0")


def test_notify_8_and_16_show_waits_and_allocations():
    _, stderr, _ = run_program(PYACC_NOTIFY=24)
    lines = pyacc_lines(stderr)
    waits = [line for line in lines if line.startswith("pyacc: wait ")]
    assert len(waits) == 1 and f"line={line_of('acc.wait_all()')}" in waits[0] and "queue=all" in waits[0]
    allocs = [line for line in lines if line.startswith("pyacc: alloc ")]
    frees = [line for line in lines if line.startswith("pyacc: free ")]
    assert len(allocs) == len(frees) == 5
    # the async region's frees run on the queue's worker, after its copy-back
    assert any("<pyacc queue 1" in line and "function=deferred" in line for line in frees)


def test_nothing_is_printed_unless_asked():
    stdout, stderr, stats = run_program()
    assert stderr == "" and stats["launch_count"] == 2
