"""Autotune from Python (docs/pipeline.md, "Autotune"): "auto" for
fetch(), tokenize(parallelism=) and options(prefetch_batches=) (the
defaults); the batches equal those of fixed settings; metrics_snapshot()
lists the values chosen and why; a bad value is refused."""
import hashlib
import unittest

import zptest

import zephon
from zephon import Dataset, Pipeline, WorkSource


def manifest():
    return str(zptest.small() / "manifest.json")


def digest(p):
    h = hashlib.sha256()
    n = 0
    for b in p:
        h.update(b.tokens.tobytes())
        n += 1
    return h.hexdigest(), n


class TestAutotune(unittest.TestCase):
    def pipeline(self, threads, fetch, tok, prefetch):
        ws = WorkSource(Dataset(manifest()), seed=5)
        return (Pipeline(ws, threads=threads, chunk_samples=8).fetch(fetch)
                .tokenize("gpt2", field="text", parallelism=tok)
                .batch(microbatch_size=4).pack("concat", 127)
                .options(prefetch_batches=prefetch))

    def test_auto_equals_fixed_and_is_reported(self):
        ref = digest(self.pipeline(1, 1, 1, 2))
        for threads in (1, 2):
            p = self.pipeline(threads, "auto", "auto", "auto").enable_observability()
            self.assertEqual(digest(p), ref)
            t = {e["op"]: e for e in p.metrics_snapshot()["tuning"]}
            self.assertEqual(set(t), {"output", "fetch", "tokenize"})
            self.assertEqual(t["output"]["setting"], "prefetch_batches")
            for e in t.values():
                self.assertTrue(e["auto"], e)
                self.assertLessEqual(e["value"], e["cap"], e)
            self.assertEqual(t["fetch"]["cap"], threads)
            p.close()
        p = self.pipeline(2, 2, 2, 5).enable_observability()
        self.assertEqual(digest(p), ref)
        t = {e["op"]: e for e in p.metrics_snapshot()["tuning"]}
        self.assertEqual((t["fetch"]["value"], t["fetch"]["auto"]), (2, False))
        self.assertEqual((t["output"]["value"], t["output"]["auto"]), (5, False))
        p.close()

    def test_defaults_are_auto(self):
        ws = WorkSource(Dataset(manifest()))
        p = (Pipeline(ws).tokenize("gpt2").batch(microbatch_size=4).pack("concat", 127)
             .enable_observability())
        t = {e["op"]: e for e in p.metrics_snapshot()["tuning"]}
        self.assertTrue(t["output"]["auto"] and t["fetch"]["auto"] and t["tokenize"]["auto"], t)
        p.close()

    def test_prefetch_look_ahead_auto(self):
        ref = digest(self.pipeline(1, 1, 1, 2))
        p = self.pipeline(2, "auto", "auto", "auto").prefetch("auto").enable_observability()
        self.assertEqual(digest(p), ref)
        t = {e["setting"]: e for e in p.metrics_snapshot()["tuning"] if e["op"] == "prefetch"}
        self.assertEqual(set(t), {"look_ahead", "parallelism"})
        for e in t.values():
            self.assertTrue(e["auto"], e)
            self.assertLessEqual(e["value"], e["cap"], e)
        p.close()
        p = self.pipeline(1, 1, 1, 2).prefetch(64, "auto").enable_observability()
        self.assertEqual(digest(p), ref)
        t = {e["setting"]: e for e in p.metrics_snapshot()["tuning"] if e["op"] == "prefetch"}
        self.assertEqual((t["look_ahead"]["value"], t["look_ahead"]["auto"]), (64, False))
        self.assertTrue(t["parallelism"]["auto"])
        p.close()

    def test_bad_values(self):
        ws = WorkSource(Dataset(manifest()))
        p = Pipeline(ws)
        with self.assertRaises(zephon.Error):
            p.fetch("fast")
        with self.assertRaises(zephon.Error):
            p.fetch(0)
        with self.assertRaises(zephon.Error):
            p.tokenize("gpt2", parallelism="many")
        with self.assertRaises(zephon.Error):
            p.options(prefetch_batches="deep")
        with self.assertRaises(zephon.Error):
            p.prefetch("far")
        with self.assertRaises(zephon.Error):
            p.prefetch(16, "many")
        p.close()


if __name__ == "__main__":
    unittest.main()
