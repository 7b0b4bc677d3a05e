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
