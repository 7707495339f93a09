"""Machine control shared by the collector and the benchmarks: the stage clock, the quiet-machine guard and the pooled builder."""

from __future__ import annotations

import concurrent.futures
import shutil
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from tqdm import tqdm

STAGES = (
    "task extraction",
    "random sampling",
    "evolutionary search",
    "cost model training",
    "cost model features",
    "de-duplication",
    "building",
    "argument allocation",
    "cache flush",
    "runner start-up",
    "timing",
    "warm timing",
    "writing",
    "quiet-machine wait",
)


"""The collector's stages, in pipeline order (:class:`StageClock`).

``cost model features`` is the evolutionary phase's XGBoost model's feature extraction
(TVM's ``PerStoreFeature``, when it trains and when it scores the search's candidates);
``evolutionary search`` and ``cost model training`` are the rest of those stages.
``timing`` is the kernels' own run time (``number * repeat`` runs of each program);
``cache flush`` is the rest of the time evaluator's wall time (the flush of the inputs
before each repeat, and the evaluator's own overhead); ``runner start-up`` is the rest
of the runner's wall time (process hand-off, loading the built module).
"""


class StageClock:
    """Wall seconds spent in each collection stage (:data:`STAGES`); a stage entered inside
    another counts for itself only (the outer stage gets the rest)."""

    def __init__(self):
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._nested: list[float] = []  # per open stage: seconds of the stages inside it

    @contextmanager
    def stage(self, name: str):
        """Add the wall time of the ``with`` body, less that of stages nested in it, to ``name``."""
        t0 = time.perf_counter()
        self._nested.append(0.0)
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.seconds[name] += took - self._nested.pop()
            if self._nested:
                self._nested[-1] += took

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += max(0.0, seconds)

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in self.seconds.items()}

    def table(self, programs: int) -> str:
        """A plain-text table: seconds, share of the total and ms per measured program of each stage."""
        total = sum(self.seconds.values()) or 1.0
        lines = [f"{'stage':<22}{'s':>9}{'share':>8}{'ms/prog':>9}"]
        for k, v in self.seconds.items():
            lines.append(f"{k:<22}{v:>9.1f}{100 * v / total:>7.1f}%{1e3 * v / max(programs, 1):>9.1f}")
        lines.append(f"{'total':<22}{total:>9.1f}{100.0:>7.1f}%{1e3 * total / max(programs, 1):>9.1f}")
        return "\n".join(lines)


@contextmanager
def scratch_folder(path: Path):
    """Create ``path`` for the build workers' artifacts (passed to :class:`PooledBuilder` as
    ``tmp_dir``) and remove it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _timed_build(args: tuple, cpu_limit_s: float | None = None, tmp_dir: str | None = None) -> tuple[str, float]:
    """In a build worker: MetaSchedule's build-and-export of one program; returns the
    artifact path and the CPU seconds it took.

    ``cpu_limit_s``: the build's CPU-time limit.  An ``ITIMER_PROF`` timer counts the
    worker's CPU time, and its signal (``SIGPROF``, default action) ends the worker when
    the limit passes, which also stops LLVM's native code generation (a Python-level
    handler could not run before LLVM returns).  A paused worker spends no CPU time, so
    a pause never ends a build.  ``tmp_dir``: where this worker writes its artifacts
    (``tempfile.tempdir`` of the worker process; ``None``: the system's)."""

    from ..tvm_compat import build_worker_function  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if tmp_dir is not None:
        tempfile.tempdir = tmp_dir

    if cpu_limit_s:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_PROF, cpu_limit_s)
    start = time.process_time()
    try:
        path = build_worker_function(args)
    finally:
        if cpu_limit_s:
            signal.setitimer(signal.ITIMER_PROF, 0)
    return path, time.process_time() - start


class PooledBuilder:
    """MetaSchedule's build-and-export of each program (``LocalBuilder``'s worker function)
    on long-lived worker processes, fed as a stream.

    ``LocalBuilder.build`` starts a fresh process pool for every batch (each start imports
    TVM again, about 3 s per batch on 2 cores) and returns only when the batch's slowest
    build ends.  Here each of ``max_workers`` threads drives one TVM ``PopenWorker``
    (restarted after ``recycle`` builds, TVM's guard against slow leaks): :meth:`submit`
    queues a batch and returns at once, so the next batch can build while the collector
    samples, and :meth:`paused` stops every worker process and its children (``SIGSTOP``,
    then ``SIGCONT``) while something is timed, so that no build ever runs beside a
    timing.  The build timeout counts each build's CPU time (:func:`_timed_build`), which
    a pause does not advance.  Results are MetaSchedule ``BuilderResult``s, as from
    ``LocalBuilder.build``.  ``f_export`` (``None``: MetaSchedule's tar archive, linked by
    the runner) writes each artifact, into ``tmp_dir`` (``None``: the system's temporary
    folder).

    Attributes:
        build_seconds: CPU seconds each finished build took in its worker, in order.
        timeouts: builds stopped at ``timeout_sec`` seconds of CPU time.
        paused_s: wall seconds the workers spent paused.
    """

    def __init__(self, max_workers: int, timeout_sec: float, f_build, recycle: int = 400, f_export=None,
                 tmp_dir: Path | None = None):
        self.max_workers, self.timeout_sec, self.f_build, self.recycle = max_workers, timeout_sec, f_build, recycle
        self.f_export, self.tmp_dir = f_export, tmp_dir
        self._threads = None
        self._local = threading.local()
        self._workers: list = []
        self._cond = threading.Condition()
        self._kill_lock = threading.Lock()  # TVM's PopenWorker.kill is not safe to call from two threads
        self._paused = self._closed = False
        self._pause_start = 0.0
        self.build_seconds: list[float] = []
        self.timeouts = 0
        self.paused_s = 0.0

    def _worker(self):
        from ..tvm_compat import popen_worker  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        w = getattr(self._local, "worker", None)
        if w is None:
            w = self._local.worker = popen_worker(maximum_uses=self.recycle)
            with self._cond:
                self._workers.append(w)
        return w

    def _build_one(self, args: tuple):
        from ..tvm_compat import ms, popen_worker_pid  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        w = self._worker()
        with self._cond:  # a worker (re)starts only here, never while paused
            while self._paused and not self._closed:
                self._cond.wait()
            if self._closed:
                return ms.builder.BuilderResult(None, "build failed: the builder was closed")
            w.send(_timed_build, (args, self.timeout_sec, None if self.tmp_dir is None else str(self.tmp_dir)),
                   timeout=max(300.0, 10 * self.timeout_sec))
            sent, paused_before, pid = time.perf_counter(), self.paused_s, popen_worker_pid(w)
        try:
            path, secs = w.recv()
        except ChildProcessError:
            self._kill(w)
            with self._cond:
                if self._closed:
                    return ms.builder.BuilderResult(None, "build failed: the builder was closed")
                active = time.perf_counter() - sent - (self.paused_s - paused_before)
            if active >= 0.9 * self.timeout_sec:  # the CPU-time limit's signal ended the worker
                self.timeouts += 1
                return ms.builder.BuilderResult(None, f"build timed out after {self.timeout_sec} s of CPU time")
            return ms.builder.BuilderResult(None, f"build failed: the build worker (pid {pid}) died")
        except TimeoutError:  # TVM's wall-clock limit, a backstop for a build that hangs without CPU time
            return ms.builder.BuilderResult(None, f"build failed: no result after {max(300.0, 10 * self.timeout_sec)} s")
        except Exception as err:
            return ms.builder.BuilderResult(None, f"build failed:\n{err}")
        self.build_seconds.append(secs)
        return ms.builder.BuilderResult(path, None)

    def submit(self, build_inputs: list) -> list:
        """Queue builds; returns one ``concurrent.futures.Future`` of a ``BuilderResult`` each."""
        from ..tvm_compat import serialize_build_params  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self.max_workers, thread_name_prefix="cdmpp-build")
        return [self._threads.submit(self._build_one, (self.f_build, self.f_export, b.mod, b.target,
                                                       serialize_build_params(b.params)))
                for b in build_inputs]

    def build(self, build_inputs: list) -> list:
        """Build a batch and wait for it (``LocalBuilder.build``'s interface)."""
        return [f.result() for f in self.submit(build_inputs)]

    def _processes(self) -> list:
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        from ..tvm_compat import popen_worker_pid  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        procs = []
        for w in self._workers:
            pid = popen_worker_pid(w)
            if pid is None:
                continue
            try:
                p = psutil.Process(pid)
                procs.append(p)
                procs.extend(p.children(recursive=True))  # a linker the export started
            except psutil.Error:
                pass
        return procs

    def _signal(self, procs: list, sig: int) -> None:
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    @staticmethod
    def _wait_stopped(procs: list, timeout_s: float = 2.0) -> None:
        """Return once every process in ``procs`` is stopped, a zombie or gone: ``SIGSTOP``
        lands only when the kernel next schedules the process, which on a busy machine can
        be after ``kill`` returns (at most ``timeout_s`` seconds of polling)."""
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        done = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD}
        deadline = time.perf_counter() + timeout_s
        pending = list(procs)
        while pending and time.perf_counter() < deadline:
            still = []
            for p in pending:
                try:
                    if p.status() not in done:
                        still.append(p)
                except psutil.Error:
                    pass
            pending = still
            if pending:
                time.sleep(0.001)

    @contextmanager
    def paused(self):
        """Stop every build worker (and the processes it started) for the ``with`` body: no
        build uses the CPU and no worker starts until it ends; queued builds wait."""

        with self._cond:
            self._paused, self._pause_start = True, time.perf_counter()
            stopped: list = []
            while True:  # a worker stopped for certain starts no more children; stop those it started
                new = [p for p in self._processes() if p.pid not in {q.pid for q in stopped}]
                if not new:
                    break
                self._signal(new, signal.SIGSTOP)
                self._wait_stopped(new)
                stopped += new
        try:
            yield
        finally:
            with self._cond:
                self._signal(stopped, signal.SIGCONT)
                self._paused = False
                self.paused_s += time.perf_counter() - self._pause_start
                self._cond.notify_all()

    def to_json(self) -> dict:
        """Build times of this run, for the manifest: count, total, median, p99 and max (CPU
        seconds), timeouts."""
        secs = sorted(self.build_seconds)
        pick = (lambda q: round(secs[min(len(secs) - 1, int(q * len(secs)))], 3)) if secs else (lambda q: None)
        return {"built": len(secs), "cpu_total_s": round(sum(secs), 1), "median_s": pick(0.5), "p99_s": pick(0.99),
                "max_s": pick(1.0), "timeouts": self.timeouts, "timeout_s": self.timeout_sec,
                "timeout_counts": "CPU time of the build", "paused_s": round(self.paused_s, 1)}

    def close(self) -> None:
        """Stop the worker processes and drop queued builds (a later build starts new ones)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            workers, self._workers = self._workers, []
            self._paused, self._closed = False, True
            self._cond.notify_all()
        for w in workers:
            self._kill(w)
        if self._threads is not None:
            self._threads.shutdown(wait=True)
        self._threads = None
        self._local = type(self._local)()
        self._closed = False

    def _kill(self, worker) -> None:
        """End a worker's process; safe while another thread ends the same one (a build
        thread whose worker :meth:`close` ended sees it die and ends it too)."""
        with self._kill_lock:
            worker.kill()


def log_note(message: str) -> None:

    tqdm.write(message)
