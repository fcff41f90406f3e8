"""Sweeps over any :class:`concurrent.futures.Executor`, results in task order.

By default a local :class:`~concurrent.futures.ProcessPoolExecutor`; pass any other executor to
run the same sweep elsewhere, e.g. a Dask cluster::

    from dask.distributed import Client, LocalCluster
    with LocalCluster(n_workers=4) as cluster, Client(cluster) as client:
        outcomes = sweep(run_study_task, tasks, executor=client.get_executor())

``fn`` and the tasks must be picklable (a module-level function and plain records). The result
list is ordered like ``tasks`` whatever order the workers finish in, so a seeded sweep gives the
same list on every executor.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from typing import TextIO, TypeVar

__all__ = ["ProgressLine", "local_pool", "sweep"]

T = TypeVar("T")
R = TypeVar("R")


class ProgressLine:
    """A one-line text progress bar on a stream (stderr by default); no dependency."""

    def __init__(self, total: int, *, label: str = "sweep", stream: TextIO | None = None, width: int = 30) -> None:
        self.total, self.label, self.width = total, label, width
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.perf_counter()
        # Redraw at most ~10 times a second, and always on the last item.
        if self.done >= self.total or now - self._last_draw >= 0.1:
            self._last_draw = now
            self._draw(now)

    def close(self) -> None:
        self._draw(time.perf_counter())
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self, now: float) -> None:
        filled = int(self.width * self.done / self.total) if self.total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total} {now - self._start:.1f}s")
        self.stream.flush()


def _leave_sigint_to_the_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def local_pool(max_workers: int | None = None) -> ProcessPoolExecutor:
    """A process pool whose workers ignore Ctrl-C: the parent stops the sweep and cancels what is queued,
    instead of every worker printing its own KeyboardInterrupt traceback."""
    return ProcessPoolExecutor(max_workers=max_workers, initializer=_leave_sigint_to_the_parent)


def sweep(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    *,
    executor: Executor | None = None,
    progress: bool | TextIO = True,
    label: str = "sweep",
) -> list[R]:
    """``[fn(t) for t in tasks]`` on ``executor`` (default: a local process pool), in task order.

    ``progress`` is True for a progress line on stderr, a stream to draw it there, or False.
    An exception inside ``fn`` propagates (a broken task is a bug, not data).
    """
    if not tasks:
        return []
    own = executor is None
    pool: Executor = executor if executor is not None else local_pool(min(len(tasks), os.cpu_count() or 1))
    bar = None if progress is False else ProgressLine(
        len(tasks), label=label, stream=None if progress is True else progress)
    futures: dict[Future[R], int] = {}
    try:
        futures.update((pool.submit(fn, task), i) for i, task in enumerate(tasks))
        results: list[R | None] = [None] * len(tasks)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            if bar is not None:
                bar.advance()
    except BaseException:
        # A failed task or Ctrl-C: what is still queued will not be used, on any executor (a given
        # one's shutdown() would otherwise run all of it first).
        for future in futures:
            future.cancel()
        raise
    finally:
        if bar is not None:
            bar.close()
        if own:
            pool.shutdown(cancel_futures=True)
    return results  # type: ignore[return-value]  # every slot was filled above
