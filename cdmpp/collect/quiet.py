"""The quiet-machine guard: a timing batch runs only while no other process is busy, and is timed again when one was."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from .config import MachineBusyError, QuietConfig


class QuietGuard:
    """Checks the CPU use of every process outside this one and its descendants.

    Before a timing batch it waits until that load stays under the threshold over a
    window; after the batch it measures the load over the batch, and the collector
    times a disturbed batch again.  Load = the CPU seconds (user + system, ``psutil``)
    that other processes used between two snapshots, per wall second, in cores; a
    process started between the snapshots counts with all its CPU time.  The collector's
    own build and run workers are its descendants and do not count.
    """

    def __init__(self, cfg: QuietConfig):
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        self.cfg = cfg
        self._psutil = psutil
        self._me = psutil.Process()
        self.waited_s = 0.0
        self.retimed = 0
        self.batches: list[tuple[float, float, bool]] = []  # (unix time at the start, load in cores, kept)
        self.last: tuple[float, dict[int, float]] | None = None  # the end of the last timed batch

    def snapshot(self) -> tuple[float, dict[int, float]]:
        """``(wall s, {pid: CPU s})`` of every process outside this process tree."""
        mine = {self._me.pid}
        try:
            mine.update(c.pid for c in self._me.children(recursive=True))
        except self._psutil.Error:
            pass
        cpu = {}
        for p in self._psutil.process_iter(["cpu_times"]):
            t = p.info.get("cpu_times")
            if p.pid not in mine and t is not None:
                cpu[p.pid] = t.user + t.system
        return time.perf_counter(), cpu

    @staticmethod
    def cores_between(start: tuple[float, dict[int, float]], end: tuple[float, dict[int, float]]) -> float:
        """Cores used by other processes between two snapshots."""
        wall = max(end[0] - start[0], 1e-3)
        return sum(max(0.0, s - start[1].get(pid, 0.0)) for pid, s in end[1].items()) / wall

    def other_cores(self, since: tuple[float, dict[int, float]]) -> float:
        """Cores used by other processes since the snapshot ``since``."""
        return self.cores_between(since, self.snapshot())

    def wait_quiet(self, report: Callable[[str], None] | None = None) -> float:
        """Block until other processes used at most ``max_other_cores`` over ``settle_s``.

        Returns:
            The load of the last window, in cores.

        Raises:
            MachineBusyError: still busy after ``max_wait_s``.
        """
        if not self.cfg.enabled:
            return 0.0
        start = time.perf_counter()
        while True:
            snap = self.snapshot()
            time.sleep(self.cfg.settle_s)
            load = self.other_cores(snap)
            if load <= self.cfg.max_other_cores:
                break
            waited = time.perf_counter() - start
            if self.cfg.max_wait_s is not None and waited > self.cfg.max_wait_s:
                raise MachineBusyError(
                    f"other processes used {load:.2f} cores (limit {self.cfg.max_other_cores}) for {waited:.0f} s; "
                    "stop them, or pass --allow-busy to time anyway"
                )
            if report is not None:
                report(f"waiting for a quiet machine: other processes use {load:.2f} cores")
        self.waited_s += time.perf_counter() - start - self.cfg.settle_s
        return load

    def run_quietly(self, fn: Callable[[], object], report: Callable[[str], None] | None = None, wait_stage=None):
        """``fn()`` (a timing batch) on a quiet machine: wait for quiet, run, and run again
        when other processes were busy during it.

        The machine counts as quiet before a batch when other processes stayed under the
        threshold since the last batch ended (no extra wait); otherwise this waits for a
        quiet window.  Every run's start, load and outcome go to ``batches``.

        Args:
            fn: the batch; its return value is returned.
            report: called with a line when waiting or running again.
            wait_stage: a context manager factory timing the waits (``None``: not timed).

        Raises:
            MachineBusyError: as :meth:`wait_quiet`.
        """
        if not self.cfg.enabled:
            return fn()
        while True:
            with wait_stage() if wait_stage is not None else contextlib.nullcontext():
                if self.last is None or self.other_cores(self.last) > self.cfg.max_other_cores:
                    self.wait_quiet(report)
            start, started_at = self.snapshot(), time.time()
            out = fn()
            self.last = self.snapshot()
            load = self.cores_between(start, self.last)
            quiet = load <= self.cfg.max_other_cores
            self.batches.append((started_at, load, quiet))
            if quiet:
                return out
            self.retimed += 1
            if report is not None:
                report(f"a batch was timed while other processes used {load:.2f} cores: timing it again")

    def to_json(self) -> dict:
        return {
            "enabled": self.cfg.enabled,
            "max_other_cores": self.cfg.max_other_cores,
            "waited_s": round(self.waited_s, 1),
            "retimed_batches": self.retimed,
            "batches": "[unix time at the start, CPU of other processes in cores, kept (1) or timed again (0)] per timing",
            "timings": [[round(t, 1), round(load, 3), int(kept)] for t, load, kept in self.batches],
        }


def quiet_runner(inner, guard: QuietGuard, report: Callable[[str], None] | None = None):
    """A MetaSchedule runner that times each batch of ``inner`` (for example a
    ``LocalRunner``, which times a batch before ``run`` returns) on a quiet machine, as
    the collector does: it waits for quiet before a batch, and times a batch again when
    other processes were busy during it (:meth:`QuietGuard.run_quietly`).

    Returns:
        A ``ms.runner.PyRunner`` for ``ms.tune_tir`` / ``tune_relax``; ``guard`` keeps the
        waits, the loads and the batches timed again.
    """
    from ..tvm_compat import derived_object, ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    @derived_object
    class QuietRunner(ms.runner.PyRunner):
        def run(self, runner_inputs):  # pylint: disable=missing-function-docstring
            def batch():
                futures = inner.run(runner_inputs)
                return [ms.runner.LocalRunnerFuture(None if r.run_secs is None else [float(x) for x in r.run_secs],
                                                     r.error_msg) for r in (f.result() for f in futures)]

            return guard.run_quietly(batch, report)

    return QuietRunner()
