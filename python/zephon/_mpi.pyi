"""Type stubs of zephon._mpi, the C extension over libzephon_mpi (zephon.mpi
is the API)."""
from typing import Any, Optional

class Comm:
    """libzephon_mpi's handle over an mpi4py communicator (collective)."""

    def __init__(self, comm_address: int, node_group_size: int = ...) -> None: ...
    def close(self) -> None:
        """Free the handle (collective over the communicator)."""
    def report(self, pipeline_address: int, out_dir: Optional[str], /) -> Optional[tuple[str, str]]:
        """The cluster report (text, JSON) on the root, None elsewhere (collective)."""
    def info(self) -> dict[str, Any]:
        """This rank's place (rank, size, node, num_nodes, local_rank, local_size, hostname)."""
    def balance(self, window: int, /) -> None:
        """Cross-rank attention-cost balance of `window` microbatches per rank for next()."""
    def next(self, pipeline_address: int, /) -> Optional[dict[str, Any]]:
        """The next batch in lock step (collective); None at the end."""
    def balance_stats(self) -> dict[str, Any]:
        """What cross-rank balance did (the same on every rank)."""
