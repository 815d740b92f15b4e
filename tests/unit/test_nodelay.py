"""spark_worker/nodelay.py without a JVM: each thread tries once, a failure costs a warning and nothing else.
(tests/integration/test_py4j_nodelay.py checks the option on a real JVM's socket.)"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from spark_worker import nodelay


class _NoReflection:
    """A ``jvm`` whose reflection fails as a JVM without the needed ``--add-opens`` would; counts the tries."""

    def __init__(self) -> None:
        self.tries = 0

    @property
    def java(self) -> Any:
        self.tries += 1
        raise RuntimeError("java.lang.reflect.InaccessibleObjectException")


def _in_thread(jvm: Any, times: int) -> list[bool]:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.extend(nodelay.no_delay(jvm) for _ in range(times)))
    t.start()
    t.join()
    return got


def test_a_failure_is_tried_once_per_thread_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    nodelay._warned.clear()
    jvm = _NoReflection()
    with caplog.at_level(logging.WARNING, logger=nodelay.__name__):
        assert _in_thread(jvm, 3) == [False, False, False]
        assert _in_thread(jvm, 2) == [False, False]
    assert jvm.tries == 2  # once per thread, not once per job
    warnings = [r for r in caplog.records if "TCP_NODELAY" in r.getMessage()]
    assert len(warnings) == 1
