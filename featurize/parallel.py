"""Featurizing many tuning records on several processes.

Replaying a record's schedule trace, building its ``Schedule`` and walking its loop nest
run in Python and on one thread, so a large folder (the Zen 4 corpus: 110k records)
featurizes on one core however many the machine has.  :func:`featurize_records` splits
the records into chunks and featurizes them on a pool of processes
(:class:`concurrent.futures.ProcessPoolExecutor`, spawned, so that no TVM or PyTorch
thread pool is forked).  The records are grouped by workload first (a
worker parses each workload it meets once, and parsing a workload's module costs more than
featurizing a program).  Each chunk travels as plain JSON (the records' and their
workloads' MetaSchedule JSON), and comes back as :class:`~cdmpp.featurize.ast.ProgramAST`
objects, put back in the records' order: the result is the same as
:func:`cdmpp.featurize.featurize_many`'s.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence

import cdmpp.featurize as featurize_pkg  # featurize_many looked up at each call (a test counts the calls)
from cdmpp.errors import InputError

from .ast import ProgramAST, UnsupportedProgramError

CHUNK = 256
"""Records per chunk (one call of :func:`cdmpp.featurize.featurize_many`)."""


POOL_FROM = 4096
"""Records from which :func:`featurize_records` uses a pool: starting the processes (each
imports TVM) costs several seconds, about as long as featurizing a few hundred records."""


def default_workers() -> int:
    """Processes for featurizing: this machine's usable cores (at most 16)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 16))


def featurize_records(records: Sequence, target, psf: bool = True, workers: int = 1, chunk: int = CHUNK,
                      progress: bool = False, pool_from: int = POOL_FROM) -> list[ProgramAST]:
    """Featurize MetaSchedule tuning records (:func:`cdmpp.featurize.featurize_many`), on
    ``workers`` processes when there is more than one chunk.

    Args:
        records: ``tvm.s_tir.meta_schedule.database.TuningRecord`` objects.
        target: the TVM target their programs were built for (``Target`` or its dict).
        psf: also extract TVM's ``PerStoreFeature`` rows.
        workers: processes (:func:`default_workers`: every core); 1 featurizes in this
            process.  The pool is spawned: a script that calls this with ``workers > 1``
            needs the ``if __name__ == "__main__":`` guard, as for any spawned pool.
        chunk: records per chunk.
        progress: show a progress bar (tqdm) over the chunks.
        pool_from: fewer records than this featurize in this process whatever ``workers``.

    Returns:
        One :class:`~cdmpp.featurize.ast.ProgramAST` per record, in order.

    Raises:
        UnsupportedProgramError: a record that cannot be featurized (naming its index).
        ValueError: ``workers`` or ``chunk`` below 1.
    """

    if workers < 1 or chunk < 1:
        raise InputError(f"workers and chunk must be at least 1, got {workers} and {chunk}")
    starts = range(0, len(records), chunk)
    bar = None
    if progress:
        from tqdm import tqdm  # noqa: PLC0415  (only on the branch that needs it)

        bar = tqdm(total=len(starts), desc="featurize", unit="chunk")
    out: list[ProgramAST] = []
    try:
        if workers == 1 or len(starts) < 2 or len(records) < pool_from:
            for s in starts:
                out += _renumbered(featurize_pkg.featurize_many, records[s : s + chunk], target, psf, list(range(s, s + chunk)))
                if bar is not None:
                    bar.update()
            return out
        # chunks of one workload's records each (mostly): a worker then parses few workloads
        order = sorted(range(len(records)), key=lambda i: records[i].workload.id_)
        for part in _pooled(records, order, _target_json(target), psf, workers, chunk):
            out += part
            if bar is not None:
                bar.update()
        return _in_order(order, out)
    finally:
        if bar is not None:
            bar.close()


def featurize_record_lines(lines: Sequence, records: Sequence, target, psf: bool = True, workers: int = 1,
                           chunk: int = CHUNK, progress: bool = False, pool_from: int = POOL_FROM) -> list[ProgramAST]:
    """Featurize tuning records given as a JSONDatabase's JSON, without building a
    ``TuningRecord`` per record: each record's trace JSON is replayed once on its workload
    (:func:`cdmpp.tvm_compat.schedule_from_json`), on ``workers`` spawned processes.  The
    trees are :func:`featurize_records`'s for the same records, at about half the work
    (``TuningRecord.from_json`` replays the trace too, and this process no longer turns
    each record back into JSON for the pool).

    Args:
        lines: the workload file's JSON lines (``[structural hash, workload JSON]``).
        records: ``(workload line index, record JSON)`` pairs; the record JSON is the
            second field of a record line (trace, run_secs, target, args).
        target, psf, workers, chunk, progress, pool_from: as for :func:`featurize_records`.

    Returns:
        One :class:`~cdmpp.featurize.ast.ProgramAST` per record, in order.

    Raises:
        UnsupportedProgramError: a record whose trace does not replay or that cannot be
            featurized (naming its index).
    """
    if workers < 1 or chunk < 1:
        raise InputError(f"workers and chunk must be at least 1, got {workers} and {chunk}")
    order = sorted(range(len(records)), key=lambda i: records[i][0])
    bar = None
    if progress:
        from tqdm import tqdm  # noqa: PLC0415  (only on the branch that needs it)

        bar = tqdm(total=len(range(0, len(records), chunk)), desc="featurize", unit="chunk")
    out: list[ProgramAST] = []
    try:
        if workers == 1 or len(records) < pool_from or len(records) <= chunk:
            for s in range(0, len(records), chunk):
                part = order[s : s + chunk]
                out += _featurize_lines(_lines_chunk(lines, [records[i] for i in part]), _target_json(target), psf,
                                        part)
                if bar is not None:
                    bar.update()
        else:
            for part in _pooled(records, order, _target_json(target), psf, workers, chunk, lines=lines):
                out += part
                if bar is not None:
                    bar.update()
    finally:
        if bar is not None:
            bar.close()
    return _in_order(order, out)


def _in_order(order: list[int], out: list[ProgramAST]) -> list[ProgramAST]:
    """The trees ``out`` of the records taken in ``order``, put back in the records' order."""
    trees: list = [None] * len(out)
    for i, tree in zip(order, out):
        trees[i] = tree
    return trees


def _renumbered(featurize_many, records, target, psf: bool, indices: list[int]) -> list[ProgramAST]:
    """``featurize_many`` of one chunk, its errors naming the records' indices in the whole
    list (``indices``; "program k" of the error is the k-th of them)."""

    try:
        return featurize_many(list(records), target, psf=psf)
    except UnsupportedProgramError as err:
        indices = indices[: len(records)]
        if indices == list(range(indices[0], indices[-1] + 1)):
            where = f"records {indices[0]}-{indices[-1]}"
        else:
            where = f"records {', '.join(map(str, indices[:8]))}{', ...' if len(indices) > 8 else ''}"
        raise UnsupportedProgramError(f"{where}: {err}") from err


def _pooled(records: Sequence, order: list[int], target: dict, psf: bool, workers: int,
            chunk: int, lines: Sequence | None = None) -> Iterator[list[ProgramAST]]:
    """The trees of each chunk of ``records`` taken in ``order``, chunk after chunk, from a
    pool of ``workers`` spawned processes (at most
    two chunks in flight per process, so that the JSON of a large folder is never all in
    memory at once).  With ``lines`` (the workloads' JSON lines), ``records`` are
    ``(workload index, record JSON)`` pairs that travel as they are."""
    import multiprocessing  # noqa: PLC0415  (only on the branch that needs it)
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

    threads = max(1, default_workers() // workers)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
                             initargs=(threads,)) as pool:
        pending: deque = deque()
        seen: dict[int, list] = {}  # each workload's JSON, serialised once
        for s in range(0, len(records), chunk):
            part = order[s : s + chunk]
            if lines is None:
                pending.append(pool.submit(_featurize_chunk, _chunk_json([records[i] for i in part], seen), target,
                                           psf, part))
            else:
                pending.append(pool.submit(_featurize_lines, _lines_chunk(lines, [records[i] for i in part]), target,
                                           psf, part))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _init_worker(threads: int) -> None:
    """Before TVM loads in a worker: its thread pool takes this process's share of the cores."""
    os.environ["TVM_NUM_THREADS"] = str(threads)


_PARSED: dict[str, object] = {}
"""In a worker process: the workloads it has parsed, by structural hash.  A chunk of an
interleaved folder holds a few dozen workloads, and parsing a workload's module costs
more than featurizing a program, so each worker parses each workload once."""


def _featurize_chunk(chunk: tuple[list, list], target: dict, psf: bool, indices: list[int]) -> list[ProgramAST]:
    """A worker's part: rebuild the chunk's records from their JSON and featurize them."""
    from cdmpp.tvm_compat import Target, TuningRecord, Workload  # noqa: PLC0415  (keeps tvm off this module's import)


    workloads_json, records_json = chunk
    for w in workloads_json:
        if str(w[0]) not in _PARSED:
            _PARSED[str(w[0])] = Workload.from_json(w)
    workloads = [_PARSED[str(w[0])] for w in workloads_json]
    records = [TuningRecord.from_json(r, workloads[w]) for w, r in records_json]
    return _renumbered(featurize_pkg.featurize_many, records, Target(target), psf, indices)


def _featurize_lines(chunk: tuple[list, list], target: dict, psf: bool, indices: list[int]) -> list[ProgramAST]:
    """A worker's part for :func:`featurize_record_lines`: each record's trace JSON replayed
    once on its workload, the resulting ``Schedule`` featurized."""
    from cdmpp.tvm_compat import Target, Workload, schedule_from_json  # noqa: PLC0415  (keeps tvm off this module's import)


    workloads_json, records_json = chunk
    for w in workloads_json:
        if str(w[0]) not in _PARSED:
            try:
                _PARSED[str(w[0])] = Workload.from_json(w)
            except Exception as err:  # noqa: BLE001  TVM raises its own error types
                raise UnsupportedProgramError(f"workload {str(w[0])[:40]} does not parse: {str(err)[:300]}") from err
    workloads = [_PARSED[str(w[0])] for w in workloads_json]
    schedules = []
    for k, (w, r) in enumerate(records_json):
        try:
            schedules.append(schedule_from_json(workloads[w], r[0]))
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            raise UnsupportedProgramError(f"record {indices[k]}: its trace does not replay: {str(err)[:300]}") from err
    return _renumbered(featurize_pkg.featurize_many, schedules, Target(target), psf, indices)


def _lines_chunk(lines: Sequence, records: Sequence) -> tuple[list, list]:
    """``(workloads, [(workload index, record JSON), ...])`` of a chunk of ``(workload line
    index, record JSON)`` pairs, each workload's JSON line once."""
    index: dict[int, int] = {}
    workloads, out = [], []
    for w, rec in records:
        if w not in index:
            index[w] = len(workloads)
            workloads.append(lines[w])
        out.append((index[w], rec))
    return workloads, out


def _chunk_json(records: Sequence, seen: dict[int, list]) -> tuple[list, list]:
    """``(workloads, [(workload index, record), ...])`` of a chunk, as plain JSON (each
    workload once); ``seen`` keeps the JSON of the workloads of earlier chunks."""
    index: dict[int, int] = {}
    workloads, out = [], []
    for rec in records:
        w = rec.workload
        key = w.id_  # the same workload object: its address
        if key not in index:
            index[key] = len(workloads)
            if key not in seen:
                seen[key] = _plain(w.as_json())
            workloads.append(seen[key])
        out.append((index[key], _plain(rec.as_json())))
    return workloads, out


def _plain(obj):
    """A TVM FFI JSON value (Array, Map, String, numbers) as plain Python."""
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return str(obj) if type(obj) is not str and isinstance(obj, str) else obj
    if hasattr(obj, "items"):
        return {str(k): _plain(v) for k, v in obj.items()}
    return [_plain(v) for v in obj]


def _target_json(target) -> dict:
    """A target as the dict TVM's ``Target`` accepts."""
    if isinstance(target, dict):
        return target
    return {str(k): _plain(v) for k, v in target.export().items()}
