"""PyTorch: an IterableDataset over a zephon Pipeline.

    from torch.utils.data import DataLoader
    from zephon.torch import ZephonIterableDataset

    loader = DataLoader(ZephonIterableDataset(make_pipeline), batch_size=None)
    for batch in loader:
        batch["tokens"]  # torch.int32 [microbatch, seq_len + 1], no copy

make_pipeline() builds a new Pipeline each time the dataset is iterated
(an epoch loop iterates it again). Zephon batches already, in its own
threads: use batch_size=None and num_workers=0 (DataLoader workers would
each run a whole pipeline: every sample num_workers times).
"""
import torch.utils.data

__all__ = ["ZephonIterableDataset"]


class ZephonIterableDataset(torch.utils.data.IterableDataset):
    """A torch IterableDataset whose each iteration runs a new pipeline,
    made by make_pipeline(), and yields its batches as dicts of tensors
    sharing the batches' memory (Batch.to_torch())."""

    def __init__(self, make_pipeline):
        super().__init__()
        if not callable(make_pipeline):
            raise TypeError("ZephonIterableDataset(make_pipeline): a function returning a Pipeline")
        self.make_pipeline = make_pipeline
        self.pipeline = None

    def __iter__(self):
        """The batches of a new pipeline, as dicts of tensors."""
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "ZephonIterableDataset in a DataLoader with num_workers > 1 would deliver every "
                "sample once per worker: use num_workers=0 (the pipeline has its own threads)")
        self.pipeline = self.make_pipeline()
        with self.pipeline:
            for batch in self.pipeline:
                yield batch.to_torch()
