"""MPI with mpi4py: the cluster-wide fetch-timing report.

    from mpi4py import MPI
    from zephon import Dataset, WorkSource, Pipeline
    from zephon.mpi import cluster_report

    work_source = WorkSource(Dataset("data/manifest.json"), seed=1, comm=MPI.COMM_WORLD)
    pipeline = Pipeline(work_source).tokenize().batch(microbatch_size=8).enable_observability()
    for batch in pipeline:
        ...
    text = cluster_report(pipeline, MPI.COMM_WORLD, out_dir="report")  # on rank 0; None elsewhere

The library duplicates the communicator (it never uses MPI_COMM_WORLD on
its own) and never initialises MPI: mpi4py does.
"""
from . import Error

__all__ = ["cluster_report", "comm_info", "balanced_batches"]

try:
    from . import _mpi
except ImportError as e:  # built without libzephon_mpi
    _mpi = None
    _why = str(e)


def _comm_address(comm):
    from mpi4py import MPI

    return MPI._addressof(comm)


def cluster_report(pipeline, comm, out_dir=None, node_group_size=0, fmt="text"):
    """Reduce every rank's snapshots to rank 0 (collective over comm; the
    pipelines must have observability on). On rank 0: the report as text
    (fmt="text") or as a dict (fmt="json"), and with out_dir its files
    (report.txt, report.json, report.csv, report.html, windows.csv) written
    there. None on the other ranks."""
    import json

    if _mpi is None:
        raise Error(f"zephon was built without MPI support ({_why})", 12)
    c = _mpi.Comm(_comm_address(comm), node_group_size=node_group_size)
    try:
        out = c.report(pipeline._address(), None if out_dir is None else str(out_dir))
    finally:
        c.close()
    if out is None:
        return None
    text, js = out
    return json.loads(js) if fmt == "json" else text


def comm_info(comm, node_group_size=0):
    """This rank's place: rank, size, node, num_nodes, local_rank,
    local_size, hostname; and its CPU binding: cores (its binding's),
    sharing (the node's ranks whose bindings overlap it), node_cores, and
    suggested_threads = max(1, cores // sharing), the thread count to give
    Pipeline(threads=...) under a launcher (docs/mpi.md, "Threads per
    rank"). Collective over comm."""
    if _mpi is None:
        raise Error(f"zephon was built without MPI support ({_why})", 12)
    c = _mpi.Comm(_comm_address(comm), node_group_size=node_group_size)
    try:
        return c.info()
    finally:
        c.close()


class BalancedBatches:
    """Batches in lock step over the ranks of comm, with the attention cost
    of each global step of `window` microbatches per rank balanced across
    the ranks (zp_mpi_balance: rows move between the ranks of a step, each
    delivered once; docs/mpi.md). Iterate it on every rank together (each
    next is collective); each item is a dict of NumPy arrays (copies):
    tokens, loss_mask, segment_ids [rows, cols] and, with doc_masking(),
    position_ids, cu_seqlens, doc_counts, max_seqlen; samples [(global_id,
    epoch, position, padded, part)]; index, epoch, rows_filled. stats()
    gives the max/mean ratios before and after. A pipeline iterated here
    must not be iterated otherwise."""

    def __init__(self, pipeline, comm, window, node_group_size=0):
        if _mpi is None:
            raise Error(f"zephon was built without MPI support ({_why})", 12)
        self._pipeline = pipeline
        self._c = _mpi.Comm(_comm_address(comm), node_group_size=node_group_size)
        try:
            self._c.balance(int(window))
        except Exception:
            self._c.close()
            raise

    def __iter__(self):
        return self

    def __next__(self):
        import numpy as np

        if self._c is None:
            raise StopIteration
        self._pipeline._started = True
        d = self._c.next(self._pipeline._address())
        if d is None:
            raise StopIteration
        shape = (d["rows"], d["cols"])
        for k, t in (("tokens", np.int32), ("loss_mask", np.uint8), ("segment_ids", np.int32),
                     ("position_ids", np.int32)):
            if d[k] is not None:
                d[k] = np.frombuffer(d[k], dtype=t).reshape(shape)
        for k in ("cu_seqlens", "doc_counts"):
            if d[k] is not None:
                d[k] = np.frombuffer(d[k], dtype=np.int32)
        return d

    def stats(self):
        """What balancing did so far (the same on every rank)."""
        return self._c.balance_stats()

    def close(self):
        """Free the handle (collective over comm)."""
        if self._c is not None:
            self._c.close()
            self._c = None


def balanced_batches(pipeline, comm, window, node_group_size=0):
    """BalancedBatches(pipeline, comm, window): see there."""
    return BalancedBatches(pipeline, comm, window, node_group_size)
