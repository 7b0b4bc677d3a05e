"""Zephon: batches for distributed training, from Python.

    from zephon import Dataset, WorkSource, Pipeline

    work_source = WorkSource(Dataset("data/manifest.json"), seed=1)
    pipeline = (
        Pipeline(work_source)
        .tokenize(tokenizer_id="gpt2", field="text")
        .batch(microbatch_size=32)
    )
    for batch in pipeline:
        tokens = batch.tokens          # numpy int32 [32, 2049], no copy

The pipeline runs in libzephon's threads (C); Python only receives finished
batches. Each batch's arrays view the pipeline's memory; the memory is
handed back to the pipeline when the last array of the batch is released.
docs/python.md is the guide.
"""
import atexit
import json
import logging
import weakref

import numpy as np

from . import _core
from ._core import Closing, Error

__all__ = ["Dataset", "WorkSource", "Pipeline", "Batch", "Error", "Closing", "version",
           "__version__"]
#: The package's version (include/zephon/common.h, where the version is written once).
__version__ = _core.__version__

_log = logging.getLogger("zephon")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def version():
    """The version of the libzephon this package runs on."""
    return _core.version()


def _emit(logs):
    for level, msg in logs:
        _log.log(_LEVELS.get(level, logging.INFO), "%s", msg)


def _check_ints(where, settings):
    """Each (name, value, bits): an integer 0..2^bits - 1 (the library's
    unsigned fields, which a negative or larger value would wrap), else an
    Error naming it."""
    for name, v, bits in settings:
        if not isinstance(v, int) or not 0 <= v < 1 << bits:
            raise Error(f"{where}: {name} = {v!r}: must be an integer 0..{(1 << bits) - 1}", 2)


def _comm_rank_size(comm):
    return comm.Get_rank(), comm.Get_size()


class Dataset(_core.Dataset):
    """Shards to read: paths, globs, folders, manifests (.json) or URLs
    (http, https, s3). Indexed on creation (record counts).

    Dataset("data/manifest.json")
    Dataset(["a.jsonl.zst", "b.jsonl.zst"], max_record_bytes=1 << 20)

    segment_bytes: stored bytes per segment of a big .jsonl(.zst) shard (0:
    the default, 8 MiB / 2 MiB; 2**64 - 1: whole shards; docs/datasets.md
    "Segments").
    """

    def __init__(self, specs, *, max_record_bytes=0, max_shard_bytes=0,
                 allow_empty_shards=False, index_store_dir=None, cache_dir=None,
                 segment_bytes=0):
        if isinstance(specs, (str, bytes)) or hasattr(specs, "__fspath__"):
            specs = [specs]
        super().__init__(list(specs), max_record_bytes=max_record_bytes,
                         max_shard_bytes=max_shard_bytes, allow_empty_shards=allow_empty_shards,
                         index_store_dir=None if index_store_dir is None else str(index_store_dir),
                         cache_dir=None if cache_dir is None else str(cache_dir),
                         segment_bytes=segment_bytes)
        _emit(self._logs())

    def __len__(self):
        """The samples of the dataset."""
        return self.num_samples()


class WorkSource(_core.WorkSource):
    """The global sample plan: which samples this rank reads, in which
    order, per epoch. Deterministic in (dataset, seed, epoch, rank,
    world_size, shuffle settings); the ranks' streams partition each epoch.

    rank and world_size come from `comm` (an mpi4py communicator) when it
    is given. mixture: [(name, shards, weight), ...] cuts the dataset's
    shards, in order, into parts drawn by weight (docs/mixtures.md).
    schedule: weights that change during the run, as a mixture file's
    "schedule" (docs/mixtures.md, "Weight schedules"): a list of
    {"at": DRAW, "weights": [w, ...] or {name: w, ...}, "linear": EVERY}
    (or of (at, weights, linear) tuples, linear 0 for a step); the
    mixture's weights hold from draw 0. A pipeline resumed
    (load_state_dict) with another schedule keeps what the state's run
    drew and follows the new one from the draw past everything delivered.

    A WorkSource describes the plan; each Pipeline made from it follows its
    own copy from the start (to continue a stream, load_state_dict()).
    """

    def __init__(self, dataset, *, seed=0, rank=None, world_size=None, shuffle=True,
                 shuffle_block_shards=8, remainder="pad", mixture=None, epoch_samples=0,
                 schedule=None, comm=None):
        _check_ints("WorkSource", (("seed", seed, 64), ("epoch_samples", epoch_samples, 64),
                                   ("shuffle_block_shards", shuffle_block_shards, 32),
                                   ("rank", rank or 0, 32), ("world_size", world_size or 0, 32)))
        if comm is not None:
            r, n = _comm_rank_size(comm)
            if (rank is not None and rank != r) or (world_size is not None and world_size != n):
                raise ValueError(f"rank/world_size ({rank}/{world_size}) disagree with the "
                                 f"communicator ({r}/{n})")
            rank, world_size = r, n
            # every rank must plan the same dataset with the same settings
            mine = (dataset.num_samples(), len(dataset.shards()), seed, bool(shuffle),
                    shuffle_block_shards, remainder, repr(mixture), epoch_samples,
                    repr(schedule))
            every = comm.allgather(mine)
            bad = [i for i, t in enumerate(every) if t != every[0]]
            if bad:
                raise Error(f"ranks disagree on the dataset or the worksource settings: rank "
                            f"{bad[0]} has {every[bad[0]]}, rank 0 has {every[0]}",
                            _core_status("mismatch"))
        self._kw = dict(seed=seed, rank=0 if rank is None else rank,
                        world_size=1 if world_size is None else world_size, shuffle=shuffle,
                        shuffle_block_shards=shuffle_block_shards, remainder=remainder,
                        parts=mixture, epoch_samples=epoch_samples,
                        phases=_schedule_phases(schedule, mixture))
        super().__init__(dataset, **self._kw)
        self.dataset = dataset
        self.comm = comm

    def _fresh(self):
        """The same plan, at its start, for one pipeline: a pipeline moves its
        plan's state as it reads, so pipelines never share one."""
        return _core.WorkSource(self.dataset, **self._kw)


def _schedule_phases(schedule, mixture):
    """A schedule (docs/mixtures.md) as the extension's (start, [weights],
    linear_every) tuples; weights given by name follow the mixture's
    order."""
    if schedule is None:
        return None
    names = [p[0] for p in (mixture or [])]
    out = []
    for k, ph in enumerate(schedule):
        if isinstance(ph, dict):
            unknown = set(ph) - {"at", "weights", "linear"}
            if unknown:
                raise ValueError(f"schedule[{k}]: unknown field {sorted(unknown)[0]!r} "
                                 "(at, weights, linear)")
            if "at" not in ph or "weights" not in ph:
                raise ValueError(f"schedule[{k}]: needs 'at' (a draw count) and 'weights'")
            at, w, lin = ph["at"], ph["weights"], ph.get("linear", 0)
        else:
            at, w, lin = (tuple(ph) + (0,))[:3]
        if isinstance(w, dict):
            missing = [n for n in names if n not in w]
            extra = [n for n in w if n not in names]
            if missing or extra:
                raise ValueError(f"schedule[{k}].weights: " +
                                 (f"no weight for part {missing[0]!r}" if missing
                                  else f"{extra[0]!r} is not a part's name"))
            w = [w[n] for n in names]
        out.append((int(at), [float(x) for x in w], int(lin)))
    return out


def _core_status(name):
    return {"invalid": 2, "state": 7, "mismatch": 10}[name]


def _make_apply(fn, pipeline):
    """The one function both runners call per record: the record's JSON
    (kind 0) or its text (kind 1, formats without JSON) in, as str; out: the
    new record's JSON (bytes), only its text (str: in token modes, where the
    record's other fields are not delivered, when the tokenize field is a
    string), or None to drop the record."""
    loads = json.loads
    encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode
    name = getattr(fn, "__name__", "map_transform")

    def apply(kind, raw):
        field = pipeline._field
        payload = loads(raw) if kind == 0 else {field: raw}
        out = fn(payload)
        if out is None:
            return None
        if not isinstance(out, dict):
            raise TypeError(f"{name} returned {type(out).__name__}: a map_transform returns a "
                            f"dict (the new record) or None (drop it)")
        if pipeline._tokenized:
            text = out.get(field)
            if type(text) is str:
                return text
        return encode(out).encode("ascii")

    return apply


_live = weakref.WeakSet()


@atexit.register
def _close_all():
    # the pipeline's threads may need the interpreter (the thread runner):
    # stop them while it is still whole
    for p in list(_live):
        try:
            p.close()
        except Exception:  # noqa: BLE001 - nothing left to report to
            pass


def _par(call, parallelism):
    """A parallelism for the binding: a count, or "auto" (-2: ZP_AUTO)."""
    if parallelism == "auto":
        return -2
    if isinstance(parallelism, str) or isinstance(parallelism, bool):
        raise Error(f"{call}: parallelism = {parallelism!r}: must be a count or 'auto'", 2)
    return parallelism


def _parse_size(what, v):
    """Bytes from an int or a string "N[K|M|G|T][i][B]" (powers of 2)."""
    if isinstance(v, bool):
        raise Error(f"options: {what} = {v!r}: a size in bytes (e.g. 512M, 4G)", 2)
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        import re
        m = re.fullmatch(r"\s*(\d+)\s*(?:([KkMmGgTt])(?:iB|B)?|B)?\s*", v)
        if not m:
            raise Error(f"options: {what} = {v!r}: a size in bytes (e.g. 512M, 4G)", 2)
        n = int(m.group(1)) << {None: 0, "k": 10, "m": 20, "g": 30, "t": 40}[
            m.group(2).lower() if m.group(2) else None]
    else:
        raise Error(f"options: {what} = {v!r}: a size in bytes (e.g. 512M, 4G)", 2)
    if n < 0 or n >= 1 << 62:
        raise Error(f"options: {what} = {v!r}: must be 0..2^62 bytes (0: off)", 2)
    return n


class Pipeline(_core.Pipeline):
    """A rank's data pipeline. Builder calls (before iteration) return the
    pipeline, so they chain:

        Pipeline(work_source)
          .prefetch(buffer_size=4096, parallelism=8)
          .map_transform(clean_text, parallelism=4)
          .tokenize(tokenizer_id="gpt2", field="text", parallelism=16)
          .batch(microbatch_size=32)
          .options(prefetch_batches=8)

    Settings of the whole run are keywords here: threads (OpenMP threads;
    0: OMP_NUM_THREADS or the cores), epochs (0: without end),
    chunk_samples, in_flight_chunks, on_bad_record ("fail" or "skip"),
    shard_cache_bytes.
    """

    def __init__(self, work_source, *, threads=0, epochs=1, chunk_samples=64,
                 in_flight_chunks=0, on_bad_record="fail", shard_cache_bytes=0):
        if not isinstance(work_source, WorkSource):
            raise TypeError("Pipeline(work_source): a zephon.WorkSource is required")
        _check_ints("Pipeline", (("epochs", epochs, 32), ("shard_cache_bytes", shard_cache_bytes, 64)))
        super().__init__(work_source._fresh(), threads=threads, epochs=epochs,
                         chunk_samples=chunk_samples, in_flight_chunks=in_flight_chunks,
                         on_bad_record=on_bad_record, shard_cache_bytes=shard_cache_bytes)
        self.work_source = work_source
        self._field = "text"
        self._tokenized = False
        self._runner = "thread"
        self._observed = False
        self._started = False
        _live.add(self)

    # ------------------------------------------------------------ builder
    def prefetch(self, buffer_size=4096, parallelism=1):
        """Download/open shards `buffer_size` samples ahead of fetch, with
        `parallelism` concurrent loads. Either may be "auto": raised while
        running when the loop waits while fetch waits for shard loads
        (docs/pipeline.md, "Autotune"); prefetch("auto") makes both automatic.
        Without this call the look-ahead is off."""
        if buffer_size == "auto" and parallelism == 1:
            parallelism = "auto"
        buf = -2 if buffer_size == "auto" else buffer_size
        if isinstance(buf, (str, bool)):
            raise Error(f"prefetch: buffer_size = {buffer_size!r}: must be a count or 'auto'", 2)
        self._prefetch(buf, _par("prefetch", parallelism))
        return self

    def fetch(self, parallelism="auto"):
        """Read records with `parallelism` concurrent fetch tasks, or "auto"
        (the default, also without this call: from 1, raised while running
        when the loop waits and chunks queue for fetch; docs/pipeline.md)."""
        self._fetch(_par("fetch", parallelism))
        return self

    def map_transform(self, fn, parallelism=1, name=None):
        """fn(payload: dict) -> dict | None on every record: the returned
        dict is the new record (its `field` is what tokenize encodes), None
        drops the record. Must be deterministic. Runs under the thread
        runner (the GIL: one record at a time) or, with
        options(runner="process"), in `parallelism` forked processes."""
        if not callable(fn):
            raise TypeError("map_transform: fn must be callable")
        self._map(_make_apply(fn, self), parallelism,
                  name or getattr(fn, "__name__", "map_transform"))
        return self

    def tokenize(self, tokenizer_id="gpt2", field="text", parallelism="auto", eot=None, bos=None,
                 match_special=False):
        """Encode the string field `field` with the tokenizer: a built-in
        name ("gpt2", "r50k_base", "p50k_base", "cl100k_base", "o200k_base")
        or a path (a tokenizer.json or its folder, a .tiktoken file, a
        SentencePiece .model; docs/tokenizers.md). Packing puts `bos` before
        and `eot` after each document: by default the tokenizer's own (its
        BOS only when its config adds one); bos=-1 means none.
        match_special=True encodes special tokens' strings in the text as
        their ids (default: ordinary text). parallelism: tasks at once, or
        "auto" (the default: tuned while running, docs/pipeline.md)."""
        self._tokenize(tokenizer_id, field, _par("tokenize", parallelism),
                       -2 if eot is None else int(eot), -2 if bos is None else int(bos),
                       bool(match_special))
        self._field = field
        self._tokenized = True
        return self

    def batch(self, microbatch_size=32):
        """Rows per batch."""
        self._batch(microbatch_size)
        return self

    def pack(self, mode="concat", seq_len=2048, window=None):
        """Token packing: "concat" (documents joined by EOT, rows of
        seq_len + 1 tokens), "pad" (one document per row) or "bestfit"
        (documents of up to seq_len + 1 tokens never cut, placed best-fit
        within a window of `window` documents of the rank's stream, default
        256; longer ones cut into full rows first; docs/packing.md)."""
        if window is None:
            self._pack(mode, seq_len)
        else:
            self._pack(mode, seq_len, window)
        return self

    def doc_masking(self, position_ids=True, cu_seqlens=True, doc_counts=True,
                    positions="restart"):
        """Token modes: also deliver the document-masking outputs, computed
        in the pipeline's threads and viewed without a copy (Batch.position_ids,
        .cu_seqlens, .max_seqlen, .doc_counts; docs/packing.md).

        positions: "restart" (0 at every document start in a row, as
        Megatron's reset_position_ids) or "continue" (a row's first document,
        cut from the row before, goes on from its position there)."""
        if positions not in ("restart", "continue"):
            raise ValueError(f"doc_masking: positions = {positions!r}: must be 'restart' or "
                             "'continue'")
        outputs = (1 if position_ids else 0) | (2 if cu_seqlens else 0) | (4 if doc_counts else 0)
        self._doc_masking(outputs, positions == "continue")
        return self

    def balance(self, window):
        """Token modes: balance the attention cost (the sum of squared
        document lengths of a row) over each `window` consecutive batches
        (the microbatches of one optimizer step): rows move between them so
        that the costliest is as cheap as the window allows; every row is
        delivered once, deterministically, and state_dict() resumes exactly
        (docs/packing.md). 0 or 1: off. counts() and metrics_snapshot() give
        the max/mean ratio before and after."""
        self._balance(int(window))
        return self

    def options(self, prefetch_batches=None, runner=None, watchdog=None, memory_budget=None):
        """prefetch_batches: finished batches buffered ahead of the loop, or
        "auto" (the default: from 8, deepened while running when the loop
        waits for batches that come in bursts; docs/pipeline.md).
        runner: "thread" (default) or "process" (Python map_transforms in
        forked worker processes). watchdog: seconds a next() may wait for a
        batch before the pipeline logs (to the "zephon" logger, while it
        still waits) what every operator is doing; 0 turns it off (default
        30; docs/pipeline.md, "Stall watchdog"). memory_budget: bytes (an
        int, or a string such as "512M" or "4G": powers of 2) that every
        buffer of the pipeline is sized from, the batches this binding
        keeps alive included; too small for the settings raises at the
        first batch, saying what they need (docs/pipeline.md, "Memory
        budget"; default None: off)."""
        if runner is not None and runner not in ("thread", "process"):
            raise ValueError(f"runner = {runner!r}: must be 'thread' or 'process'")
        if runner is not None:
            self._runner = runner
        if prefetch_batches == "auto":
            pb = -2
        elif prefetch_batches is None:
            pb = -1
        elif isinstance(prefetch_batches, str) or prefetch_batches < 0:
            raise Error(f"options: prefetch_batches = {prefetch_batches!r}: must be a count "
                        "or 'auto'", 2)
        else:
            pb = prefetch_batches
        if watchdog is not None and not (isinstance(watchdog, (int, float)) and 0 <= watchdog <= 1e6):
            raise Error(f"options: watchdog = {watchdog!r}: must be 0..1000000 seconds (0: off)", 2)
        budget = -1 if memory_budget is None else _parse_size("memory_budget", memory_budget)
        self._options(pb, self._runner == "process", -1.0 if watchdog is None else float(watchdog),
                      budget)
        return self

    def enable_observability(self):
        """Collect metrics and timings (costs throughput: for tuning)."""
        self._enable_observability()
        self._observed = True
        return self

    # ------------------------------------------------------------ iteration
    def __iter__(self):
        """The pipeline is its own iterator (one pass over its epochs)."""
        return self

    def __next__(self):
        """The next batch; StopIteration at the end. Waits for it in slices
        that see Ctrl-C: a KeyboardInterrupt leaves the pipeline usable (the
        next call delivers the batch that was awaited) and closable."""
        self._started = True
        try:
            b = self._next()
        finally:
            logs = self._logs()
            if logs:
                _emit(logs)
        if b is None:
            raise StopIteration
        return b

    # ------------------------------------------------------------ snapshots
    def metrics_snapshot(self):
        """Activity of the pipeline and of each operator, as a dict. The
        map operators' runners add their own figures under "runners"
        (under the process runner: the workers' busy time and the round
        trips' overhead)."""
        d = json.loads(self._snapshot(0))
        d["runners"] = self._runner_stats()
        return d

    def fetch_timing_snapshot(self):
        """Time spent fetching and reading records, as a dict."""
        return json.loads(self._snapshot(1))

    def prefetch_timing_snapshot(self):
        """Time spent by shard prefetching, as a dict."""
        return json.loads(self._snapshot(2))

    def counts(self):
        """What the stream delivered so far (batches, samples, padded,
        skipped, filtered, tokens, ...), as a dict."""
        return self._counts()

    # ------------------------------------------------------------ checkpoints
    def state_dict(self):
        """Where the stream stands after the last delivered batch, as a dict
        (JSON-safe): load it into a new pipeline with the same settings to
        continue the identical stream."""
        return json.loads(self._state_save())

    def load_state_dict(self, state):
        """Continue from state_dict() (of this rank, or a merged job state).
        Before iteration."""
        if isinstance(state, (str, bytes)):
            state = json.loads(state)
        self._state_restore(json.dumps(state))

    # ------------------------------------------------------------ lifetime
    @property
    def eot(self):
        """The tokenizer's end-of-text id (-1 without tokenize)."""
        return self._eot()

    @property
    def bos(self):
        """The id packed before each document (-1: none, or no tokenize)."""
        return self._bos()

    @property
    def tokenizer_ident(self):
        """The tokenizer's identity (a built-in name, or a file's kind and
        content hash), as pre-tokenized shards and states record it; None
        without tokenize."""
        return self._tokenizer_ident()

    def close(self):
        """Stop the pipeline's threads and worker processes. Batches still
        alive stay valid; the memory goes when the last one is released.
        A transform that is running is stopped: the process runner's
        workers are killed, a thread-runner transform gets Closing raised
        inside it (a transform blocked in one C call is waited for)."""
        self._close()

    def __enter__(self):
        """with Pipeline(...) as p: closes p at the end of the block."""
        return self

    def __exit__(self, *exc):
        """Closes the pipeline."""
        self.close()
        return False


class Batch(_core.Batch):
    """A delivered batch. Its arrays view the pipeline's memory (no copy)
    and keep it valid for as long as any of them lives.

    Token modes: tokens (int32 [rows, seq_len + 1]), inputs/targets (views
    tokens[:, :-1] / tokens[:, 1:]), loss_mask (uint8), segment_ids (int32);
    with Pipeline.doc_masking(): position_ids, cu_seqlens, max_seqlen,
    doc_counts.
    Record mode: records (list of bytes, copies), data (uint8) and offsets
    (uint64) views. Fixed-shape HDF5 fields: arrays (dict name -> array).
    """

    __slots__ = ()

    def _arr(self, name):
        return np.asarray(self._view(name))

    @property
    def tokens(self):
        """int32 [rows, seq_len + 1] (token modes), a view of the batch's memory."""
        return self._arr("tokens")

    @property
    def inputs(self):
        """tokens[:, :-1]: the model's inputs (a view)."""
        return self._arr("tokens")[:, :-1]

    @property
    def targets(self):
        """tokens[:, 1:]: the next-token targets (a view)."""
        return self._arr("tokens")[:, 1:]

    @property
    def loss_mask(self):
        """uint8 [rows, seq_len + 1]: 1 where a token is real, 0 on padding (a view)."""
        return self._arr("loss_mask")

    @property
    def segment_ids(self):
        """int32 [rows, seq_len + 1]: the document number within the row, -1 on padding (a view)."""
        return self._arr("segment_ids")

    def _masking(self, name):
        if name not in self._info()["masking"]:
            raise AttributeError(f"{name}: not delivered (Pipeline.doc_masking({name}=True))")
        return self._arr(name)

    @property
    def position_ids(self):
        """int32 [rows, seq_len + 1]: each token's position in its document within the
        row (Pipeline.doc_masking; a view)."""
        return self._masking("position_ids")

    @property
    def cu_seqlens(self):
        """int32 [n]: sequence starts over the inputs (tokens[:, :-1]) flattened row by
        row, then rows * seq_len: every document piece and padding run of a row
        is one sequence (Pipeline.doc_masking; a view)."""
        return self._masking("cu_seqlens")

    @property
    def max_seqlen(self):
        """The longest sequence of cu_seqlens (Pipeline.doc_masking)."""
        self._masking("cu_seqlens")
        return self._info()["max_seqlen"]

    @property
    def doc_counts(self):
        """int32 [rows]: documents with a token among each row's inputs
        (Pipeline.doc_masking; a view)."""
        return self._masking("doc_counts")

    @property
    def data(self):
        """uint8: the records' bytes back to back (record mode, a view)."""
        return self._arr("data")

    @property
    def offsets(self):
        """uint64 [rows + 1]: where each record starts in data (record mode, a view)."""
        return self._arr("offsets")

    @property
    def records(self):
        """The records' JSON bytes, one bytes object each (copies; record mode)."""
        data, off = self.data, self.offsets
        return [bytes(data[off[i]:off[i + 1]]) for i in range(len(off) - 1)]

    @property
    def arrays(self):
        """The fixed-shape HDF5 fields: dict name -> array (views)."""
        return {name: self._arr(name) for name in self._info()["arrays"]}

    @property
    def info(self):
        """index, epoch, last_in_epoch, mode, rows, cols, rows_filled."""
        return self._info()

    @property
    def index(self):
        """The batch's position in the stream (0, 1, ...)."""
        return self._info()["index"]

    @property
    def epoch(self):
        """The epoch the batch belongs to."""
        return self._info()["epoch"]

    @property
    def samples(self):
        """[(shard, record, global_id, epoch, position, padded, part)]"""
        return self._samples()

    @property
    def global_ids(self):
        """The samples' global ids (uint64 array, a copy)."""
        return np.frombuffer(self._global_ids(), dtype=np.uint64)

    def to_torch(self):
        """The batch's arrays as torch tensors sharing its memory."""
        import torch

        info = self._info()
        names = (["tokens", "loss_mask", "segment_ids"] + info["masking"]
                 if info["mode"] != "records" else ["data", "offsets"])
        out = {n: torch.from_numpy(self._arr(n)) for n in names}
        if "cu_seqlens" in info["masking"]:
            out["max_seqlen"] = info["max_seqlen"]
        out.update({n: torch.from_numpy(a) for n, a in self.arrays.items()})
        return out

    def __getitem__(self, name):
        """batch["tokens"], batch["loss_mask"], ..., or a fixed-shape field."""
        if name in ("tokens", "loss_mask", "segment_ids", "data", "offsets"):
            return self._arr(name)
        if name in ("position_ids", "cu_seqlens", "doc_counts"):
            return self._masking(name)
        return self.arrays[name]

    def __repr__(self):
        i = self._info()
        return (f"<zephon.Batch index={i['index']} epoch={i['epoch']} mode={i['mode']} "
                f"rows={i['rows']} cols={i['cols']}>")


_core._set_batch_class(Batch)
