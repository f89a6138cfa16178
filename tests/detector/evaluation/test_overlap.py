"""overlap.InOrder: host calls run on one thread, results in order."""

import threading
import time

import pytest

from detector.evaluation import overlap


def test_results_keep_submission_order_and_run_off_the_main_thread():
    threads, running, most = set(), [0], [0]
    lock = threading.Lock()

    def work(k):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threads.add(threading.current_thread().name)
        time.sleep(0.002 * (k % 3))  # later calls may be quicker
        with lock:
            running[0] -= 1
        return [k, k * k]

    with overlap.InOrder(depth=2) as host:
        for k in range(12):
            host.submit(work, k)
            assert len(host._pending) <= 2  # bounded: waits on the oldest
        parts = host.results()
    assert parts == [[k, k * k] for k in range(12)]
    assert most[0] == 1 and threading.current_thread().name not in threads


def test_an_error_in_a_host_call_reaches_the_caller():
    def fail():
        raise RuntimeError("bad batch")

    with (
        pytest.raises(RuntimeError, match="bad batch"),
        overlap.InOrder(depth=1) as host,
    ):
        host.submit(fail)
        host.submit(lambda: None)  # waits on the first: raises here
    with pytest.raises(ValueError, match="depth=0"):
        overlap.InOrder(depth=0)
