"""The zephon package: the seed's builder API, equality with the C pipeline,
exactly-once over ranks, zero-copy batches and their lifetime, snapshots,
checkpoints, errors."""
import gc
import hashlib
import json
import os
import subprocess
import unittest

import zptest  # noqa: F401  (sets sys.path)

import numpy as np

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:  # a venv with numpy only (tools/test.sh's second install)
    HAVE_TORCH = False

import zephon
from zephon import Dataset, Pipeline, WorkSource


def manifest():
    return str(zptest.small() / "manifest.json")


def tokens_pipeline(seed=3, **kw):
    ws = WorkSource(Dataset(manifest()), seed=seed)
    return (Pipeline(ws, **kw).tokenize(tokenizer_id="gpt2", field="text")
            .batch(microbatch_size=4).pack("concat", 255))


class TestEqualsC(unittest.TestCase):
    def test_token_batches_equal_the_c_pipelines(self):
        want = zptest.c_digests(manifest(), "--seed", 3, "--tokenize", "gpt2", "--microbatch", 4,
                                "--seq-len", 255)
        got = [(b.index, b.epoch, b.digest()) for b in tokens_pipeline()]
        self.assertGreater(len(want), 10)
        self.assertEqual(got, want)

    def test_record_batches_equal_the_c_pipelines_over_epochs(self):
        want = zptest.c_digests(manifest(), "--seed", 5, "--microbatch", 7, "--epochs", 2)
        p = Pipeline(WorkSource(Dataset(manifest()), seed=5), epochs=2).batch(microbatch_size=7)
        got = [(b.index, b.epoch, b.digest()) for b in p]
        self.assertEqual(got, want)
        self.assertEqual({e for _, e, _ in got}, {0, 1})

    def test_pipelines_of_one_worksource_are_independent(self):
        ws = WorkSource(Dataset(manifest()), seed=3)
        a = Pipeline(ws).batch(microbatch_size=9)
        b = Pipeline(ws).batch(microbatch_size=9)
        da, db = [], []
        for x, y in zip(a, b):  # interleaved: both run at once
            da.append(x.digest())
            db.append(y.digest())
        self.assertEqual(da, db)
        self.assertEqual(len(da), 67)

    def test_independent_of_threads(self):
        a = [b.digest() for b in tokens_pipeline(threads=1)]
        b = [b.digest() for b in tokens_pipeline(threads=3)]
        self.assertEqual(a, b)


class TestExactlyOnce(unittest.TestCase):
    def test_ranks_partition_the_dataset(self):
        ds = Dataset(manifest())
        n = ds.num_samples()
        self.assertEqual(n, 600)
        seen = []
        for rank in range(3):
            ws = WorkSource(ds, seed=11, rank=rank, world_size=3)
            for b in Pipeline(ws).batch(microbatch_size=10):
                seen.extend(int(g) for g in b.global_ids)
                self.assertEqual(len(b.records), b.info["rows"])
        self.assertEqual(sorted(seen), list(range(n)))

    def test_records_are_the_shards_lines(self):
        lines = []
        for f in sorted(zptest.small().glob("*.jsonl")):
            lines.extend(f.read_bytes().splitlines())
        ws = WorkSource(Dataset(manifest()), shuffle=False)
        got = [r for b in Pipeline(ws).batch(microbatch_size=64) for r in b.records]
        self.assertEqual(got, lines)

    def test_gzip_glob_reads_the_shards_lines(self):
        # .jsonl.gz shards (docs/formats.md "gzip") through a glob: the
        # records are the lines, and the batches those of the C pipeline
        import gzip
        d = zptest.tmpdir() / "gz"
        d.mkdir(exist_ok=True)
        lines = []
        for f in sorted(zptest.small().glob("*.jsonl")):
            (d / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
            lines.extend(f.read_bytes().splitlines())
        spec = str(d / "*.jsonl.gz")
        ws = WorkSource(Dataset(spec), shuffle=False)
        got = [r for b in Pipeline(ws).batch(microbatch_size=64) for r in b.records]
        self.assertEqual(got, lines)
        want = zptest.c_digests(spec, "--seed", 3, "--microbatch", 8)
        p = Pipeline(WorkSource(Dataset(spec), seed=3)).batch(microbatch_size=8)
        self.assertEqual([(b.index, b.epoch, b.digest()) for b in p], want)

    def test_parquet_glob_reads_the_rows(self):
        # .parquet shards (docs/formats.md "Parquet") written by pyarrow
        # (tools/pqref.sh's environment): each record is the row as a JSON
        # object, equal to the line it was written from; the batches, with
        # tokenize, those of the C pipeline
        import json
        pqref = subprocess.run(["bash", str(zptest.REPO / "tools" / "pqref.sh")], check=True,
                               capture_output=True, text=True).stdout.split()[-1]
        d = zptest.tmpdir() / "pq"
        d.mkdir(exist_ok=True)
        lines = []
        for f in sorted(zptest.small().glob("*.jsonl")):
            lines.extend(f.read_bytes().splitlines())
            subprocess.run([os.path.join(pqref, "venv", "bin", "python"), "-c",
                            "import sys, pyarrow.json as j, pyarrow.parquet as q; "
                            "q.write_table(j.read_json(sys.argv[1]), sys.argv[2], row_group_size=64)",
                            str(f), str(d / (f.name[:-len(".jsonl")] + ".parquet"))], check=True)
        spec = str(d / "*.parquet")
        ws = WorkSource(Dataset(spec), shuffle=False)
        got = [json.loads(r) for b in Pipeline(ws).batch(microbatch_size=64) for r in b.records]
        self.assertEqual(got, [json.loads(l) for l in lines])
        want = zptest.c_digests(spec, "--seed", 3, "--tokenize", "gpt2", "--seq-len", 64,
                                "--microbatch", 4)
        p = (Pipeline(WorkSource(Dataset(spec), seed=3)).tokenize("gpt2")
             .pack("concat", seq_len=64).batch(microbatch_size=4))
        self.assertEqual([(b.index, b.epoch, b.digest()) for b in p], want)

    def test_plan_is_the_delivered_order(self):
        ws = WorkSource(Dataset(manifest()), seed=11, rank=1, world_size=2)
        plan = ws.samples(0, 0, 300)
        got = [int(g) for b in Pipeline(ws).batch(microbatch_size=7) for g in b.global_ids]
        self.assertEqual([g for _, _, g, _ in plan], got)
        with self.assertRaises(zephon.Error):
            ws.samples(0, 300, 1)  # past this rank's epoch

    def test_remainder_drop_and_pad(self):
        ds = Dataset(manifest())
        for rem, each in (("pad", 86), ("drop", 85)):
            ws = WorkSource(ds, world_size=7, rank=6, remainder=rem)
            self.assertEqual(ws.info()["samples_per_rank"], each)


class TestZeroCopy(unittest.TestCase):
    def test_arrays_view_the_batch_memory(self):
        p = tokens_pipeline()
        b = next(p)
        t = b.tokens
        self.assertEqual(t.dtype, np.int32)
        self.assertEqual(t.shape, (4, 256))
        # the same memory every time: no copy
        self.assertEqual(t.__array_interface__["data"][0],
                         b.tokens.__array_interface__["data"][0])
        self.assertTrue(np.shares_memory(b.inputs, t))
        self.assertTrue(np.shares_memory(b.targets, t))
        self.assertEqual(b.loss_mask.dtype, np.uint8)
        self.assertEqual(b.segment_ids.dtype, np.int32)
        self.assertEqual(b.digest(), zephon._core.Batch.digest(b))
        self.assertEqual(p.eot, 50256)
        p.close()

    def test_kept_arrays_outlive_next_and_close(self):
        """Every batch's tokens kept while the stream runs on with a small
        output buffer: each still holds what it held when delivered (its
        buffer was not reused), also after the pipeline is closed and
        dropped; the memory goes back when the arrays go."""
        want = [b.digest() for b in tokens_pipeline()]
        p = tokens_pipeline().options(prefetch_batches=1)
        kept = []
        for b in p:
            kept.append((b.tokens, b.loss_mask, b.segment_ids,
                         hashlib.sha256(b.tokens.tobytes()).hexdigest()))
            del b
        self.assertEqual(p.counts()["kept_batches"], len(want))
        p.close()
        del p
        gc.collect()
        for t, m, s, h in kept:
            self.assertEqual(hashlib.sha256(t.tobytes()).hexdigest(), h)
        # the digests computed from the kept arrays equal the stream's
        self.assertEqual(len(kept), len(want))
        p = tokens_pipeline()
        for (t, m, s, h), b in zip(kept, p):
            self.assertTrue(np.array_equal(t, b.tokens))
            self.assertTrue(np.array_equal(m, b.loss_mask))
        p.close()

    def test_released_batches_are_reused(self):
        p = tokens_pipeline().options(prefetch_batches=1)
        for b in p:
            t = b.tokens  # noqa: F841 (released when rebound)
        self.assertLessEqual(p.counts()["kept_batches"], 2)
        del t, b
        self.assertEqual(p.counts()["kept_batches"], 0)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_torch_shares_the_memory(self):
        import torch

        p = tokens_pipeline()
        b = next(p)
        a = torch.from_numpy(b.tokens)
        d = torch.from_dlpack(b.tokens)
        self.assertEqual(a.data_ptr(), b.tokens.__array_interface__["data"][0])
        self.assertEqual(d.data_ptr(), a.data_ptr())
        tt = b.to_torch()
        self.assertEqual(tt["tokens"].data_ptr(), a.data_ptr())
        self.assertEqual(tt["tokens"].dtype, torch.int32)
        del b
        keep = hashlib.sha256(a.numpy().tobytes()).hexdigest()
        for _ in p:
            pass
        self.assertEqual(hashlib.sha256(a.numpy().tobytes()).hexdigest(), keep)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_iterable_dataset_adapter(self):
        from torch.utils.data import DataLoader

        from zephon.torch import ZephonIterableDataset

        want = [b.digest() for b in tokens_pipeline()]
        loader = DataLoader(ZephonIterableDataset(tokens_pipeline), batch_size=None)
        got = []
        for epoch in range(2):
            n = 0
            for batch in loader:
                self.assertEqual(tuple(batch["tokens"].shape), (4, 256))
                n += 1
            got.append(n)
        self.assertEqual(got, [len(want), len(want)])


class TestObservabilityAndState(unittest.TestCase):
    def test_snapshots_are_dicts(self):
        p = tokens_pipeline().enable_observability()
        for step, b in enumerate(p):
            if step == 2:
                m = p.metrics_snapshot()
                f = p.fetch_timing_snapshot()
                pf = p.prefetch_timing_snapshot()
        self.assertIsInstance(m, dict)
        self.assertEqual(m["batches"], 3)
        self.assertIn("operators", m)
        self.assertIsInstance(f, dict)
        self.assertIsInstance(pf, dict)
        json.dumps([m, f, pf])

    def test_snapshot_without_observability_raises(self):
        p = tokens_pipeline()
        with self.assertRaises(zephon.Error) as cm:
            p.metrics_snapshot()
        self.assertIn("observability", str(cm.exception))

    def test_state_dict_resumes_the_identical_stream(self):
        want = [b.digest() for b in tokens_pipeline()]
        p = tokens_pipeline()
        got = []
        for b in p:
            got.append(b.digest())
            if len(got) == 5:
                break
        state = p.state_dict()
        json.dumps(state)
        p.close()
        q = tokens_pipeline()
        q.load_state_dict(state)
        got.extend(b.digest() for b in q)
        self.assertEqual(got, want)

    def test_state_of_other_settings_is_refused(self):
        p = tokens_pipeline()
        next(p)
        state = p.state_dict()
        q = tokens_pipeline(seed=4)
        with self.assertRaises(zephon.Error) as cm:
            q.load_state_dict(state)
        self.assertIn("seed", str(cm.exception))


class TestErrors(unittest.TestCase):
    def test_missing_shard_names_it(self):
        with self.assertRaises(zephon.Error) as cm:
            Dataset("/nonexistent/shard.jsonl")
        self.assertIn("/nonexistent/shard.jsonl", str(cm.exception))
        self.assertEqual(cm.exception.args[1], 4)  # ZP_ERR_IO

    def test_same_file_twice(self):
        f = str(sorted(zptest.small().glob("*.jsonl"))[0])
        with self.assertRaises(zephon.Error):
            Dataset([f, f])

    def test_bad_settings_name_the_value(self):
        ws = WorkSource(Dataset(manifest()))
        with self.assertRaises(zephon.Error) as cm:
            Pipeline(ws).batch(microbatch_size=0)
        self.assertIn("0", str(cm.exception))
        with self.assertRaises(zephon.Error):
            Pipeline(ws).prefetch(buffer_size=16, parallelism=0)
        with self.assertRaises(zephon.Error) as cm:
            WorkSource(Dataset(manifest()), rank=5, world_size=2)
        self.assertIn("rank", str(cm.exception))
        with self.assertRaises(ValueError):
            Pipeline(ws).options(runner="gpu")
        with self.assertRaises(zephon.Error) as cm:
            Pipeline(ws).batch(microbatch_size=-1)
        self.assertIn("microbatch_size = -1", str(cm.exception))
        with self.assertRaises(zephon.Error) as cm:
            Pipeline(ws).batch(microbatch_size=1 << 40)
        self.assertIn("microbatch_size", str(cm.exception))
        with self.assertRaises(zephon.Error):
            Pipeline(ws).options(prefetch_batches=-3)
        with self.assertRaises(zephon.Error):
            Pipeline(ws).map_transform(lambda r: r, parallelism=0)
        with self.assertRaises(zephon.Error) as cm:
            Pipeline(ws, epochs=-1)
        self.assertIn("epochs = -1", str(cm.exception))
        with self.assertRaises(zephon.Error) as cm:
            Pipeline(ws, threads=100000)
        self.assertIn("threads = 100000", str(cm.exception))
        with self.assertRaises(zephon.Error) as cm:
            WorkSource(Dataset(manifest()), seed=-1)
        self.assertIn("seed = -1", str(cm.exception))

    def test_builder_after_start_is_refused(self):
        p = tokens_pipeline()
        next(p)
        with self.assertRaises(zephon.Error) as cm:
            p.batch(microbatch_size=3)
        self.assertEqual(cm.exception.args[1], 7)  # ZP_ERR_STATE

    def test_corrupt_shard_names_shard_and_line(self):
        d = zptest.tmpdir() / "bad"
        d.mkdir(exist_ok=True)
        (d / "a.jsonl").write_text('{"text": "fine"}\n{"text": "broken\n{"text": "x"}\n')
        p = Pipeline(WorkSource(Dataset(str(d / "a.jsonl")), shuffle=False)).tokenize().batch(
            microbatch_size=1)
        with self.assertRaises(zephon.Error) as cm:
            for _ in p:
                pass
        self.assertIn("a.jsonl", str(cm.exception))
        self.assertIn("line 2", str(cm.exception))

    def test_skip_policy_logs_and_counts(self):
        d = zptest.tmpdir() / "bad2"
        d.mkdir(exist_ok=True)
        (d / "a.jsonl").write_text('{"text": "fine"}\n{"text": 7}\n{"text": "x"}\n')
        p = Pipeline(WorkSource(Dataset(str(d / "a.jsonl")), shuffle=False),
                     on_bad_record="skip").tokenize().batch(microbatch_size=1).pack("pad", 8)
        with self.assertLogs("zephon", level="WARNING") as logs:
            n = sum(1 for _ in p)
        self.assertEqual(p.counts()["skipped"], 1)
        self.assertEqual(n, 2)  # the two good documents, one row each
        self.assertTrue(any("line 2" in m for m in logs.output))


if __name__ == "__main__":
    unittest.main()
