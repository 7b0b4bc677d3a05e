"""A PyTorch-style training loop fed by Zephon on every MPI rank.

    mpirun -np 2 python3 examples/python/train_mpi.py demo-data/manifest.json --report report

Each rank reads its own share of every epoch (the WorkSource splits the
dataset over the communicator's ranks, exactly once), trains a tiny model on
the token batches (zero-copy into torch), and at the end the ranks' fetch
timings are reduced to rank 0, which writes the cluster report.
"""
import argparse
import time

import torch
from mpi4py import MPI

from zephon import Dataset, Pipeline, WorkSource
from zephon.mpi import cluster_report

ap = argparse.ArgumentParser()
ap.add_argument("data", nargs="+", help="shards, folders or a manifest")
ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: one epoch)")
ap.add_argument("--microbatch", type=int, default=8)
ap.add_argument("--seq-len", type=int, default=256)
ap.add_argument("--report", default=None, help="folder for the cluster report (rank 0)")
ap.add_argument("--ids-out", default=None, help="write this rank's sample ids to FILE.rank-R")
args = ap.parse_args()

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)

work_source = WorkSource(Dataset(args.data), seed=1234, comm=comm)
pipeline = (
    Pipeline(work_source)
    .tokenize(tokenizer_id="gpt2", field="text", parallelism=2)
    .batch(microbatch_size=args.microbatch)
    .pack("concat", args.seq_len)
    .enable_observability()
)

# a tiny model (it predicts the next token id modulo `classes`): the point is
# the data path, not the model
vocab, dim, classes = 50257, 16, 256
model = torch.nn.Sequential(torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, classes))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ids = []
t0 = time.perf_counter()
steps = 0
for step, batch in enumerate(pipeline):
    t = batch.to_torch()                       # shares the batch's memory
    inputs = t["tokens"][:, :-1].long()
    targets = t["tokens"][:, 1:].long() % classes
    mask = t["loss_mask"][:, 1:].float()
    logits = model(inputs)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, classes), targets.reshape(-1),
                                             reduction="none")
    loss = (loss * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)
    opt.zero_grad()
    loss.backward()
    opt.step()
    ids.extend(int(g) for g in batch.global_ids)
    steps = step + 1
    if args.steps and steps >= args.steps:
        break
    if step % 200 == 0:
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)

seconds = time.perf_counter() - t0
# token packing can end one rank a batch earlier: the loop above ran to each
# rank's own end; the report is collective, so every rank reaches it
text = cluster_report(pipeline, comm, out_dir=args.report)
if args.ids_out:
    with open(f"{args.ids_out}.rank-{rank}", "w") as f:
        f.write("\n".join(map(str, ids)) + "\n")
print(f"rank {rank}: {steps} steps in {seconds:.2f} s, {len(ids)} documents started", flush=True)
if text is not None:
    print(text)
pipeline.close()
