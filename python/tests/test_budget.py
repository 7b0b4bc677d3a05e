"""The memory budget from Python (docs/pipeline.md, "Memory budget"):
options(memory_budget=...) never changes the batches, a budget too small
raises at the first batch saying what it needs, the batches the binding
keeps alive count against it, and metrics_snapshot() reports the plan."""
import re
import unittest

import zptest  # noqa: F401  (sets sys.path)

import zephon
from zephon import Dataset, Pipeline, WorkSource


def manifest():
    return str(zptest.small() / "manifest.json")


def pipeline(**opts):
    ws = WorkSource(Dataset(manifest()), seed=3)
    p = (Pipeline(ws).tokenize(tokenizer_id="gpt2", field="text")
         .batch(microbatch_size=4).pack("concat", 255))
    return p.options(**opts) if opts else p


class TestMemoryBudget(unittest.TestCase):
    def test_same_batches(self):
        want = [b.digest() for b in pipeline()]
        got = [b.digest() for b in pipeline(memory_budget="64M")]
        self.assertGreater(len(want), 10)
        self.assertEqual(got, want)
        self.assertEqual([b.digest() for b in pipeline(memory_budget=64 << 20)], want)

    def test_too_small_says_what_it_needs(self):
        p = pipeline(memory_budget="16K")
        with self.assertRaises(zephon.Error) as cm:
            next(iter(p))
        msg = str(cm.exception)
        self.assertIn("memory_budget = 16.0 KiB (16384 bytes): too small", msg)
        self.assertIn("needs at least", msg)

    def test_bad_size(self):
        for bad in ("12X", -1, 1.5, True):
            with self.assertRaises(zephon.Error):
                pipeline(memory_budget=bad)

    def test_kept_batches_count(self):
        with self.assertRaises(zephon.Error) as cm:
            next(iter(pipeline(memory_budget=1)))
        need = int(re.search(r"needs at least [^(]*\((\d+) bytes\)", str(cm.exception)).group(1))
        budget = need + (64 << 10)  # room for a few kept batches
        p = pipeline(memory_budget=budget).enable_observability()
        it = iter(p)
        kept = [next(it)]
        m = p.metrics_snapshot()["memory"]
        self.assertEqual(m["budget"], budget)
        self.assertLessEqual(m["total"], m["budget"])
        cap = m["kept_batches"]
        self.assertGreaterEqual(cap, 2)
        self.assertLess(cap, 8)
        with self.assertRaises(zephon.Error) as cm:
            for _ in range(cap + 1):
                kept.append(next(it))  # every batch alive: kept by the binding
        self.assertIn("zp_pipeline_keep_batch", str(cm.exception))
        self.assertEqual(len(kept), cap)


if __name__ == "__main__":
    unittest.main()
