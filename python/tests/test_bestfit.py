"""Best-fit packing from Python (Pipeline.pack("bestfit", seq_len, window=N),
docs/packing.md): documents of up to seq_len + 1 tokens are never cut, the
padding and cut-document fractions are in counts() and metrics_snapshot(),
a state_dict taken inside a window resumes byte-identically, and the batches
equal the C pipeline's (zephon run --pack bestfit:N)."""
import unittest

import zptest

import numpy as np

from zephon import Dataset, Pipeline, WorkSource

SEQ = 255


def manifest():
    return str(zptest.small() / "manifest.json")


def pipeline(mode="bestfit", window=16, state=None, threads=2, **kw):
    p = (Pipeline(WorkSource(Dataset(manifest()), seed=3), threads=threads)
         .tokenize(tokenizer_id="gpt2", field="text").batch(microbatch_size=4))
    if mode == "bestfit":
        p.pack(mode, SEQ, window=window)
    else:
        p.pack(mode, SEQ)
    p.enable_observability()
    if state is not None:
        p.load_state_dict(state)
    return p


def rows_of(p):
    """Every batch's tokens, loss mask and segment ids, copied."""
    return [(b.index, b.tokens.copy(), b.loss_mask.copy(), b.segment_ids.copy()) for b in p]


class TestBestFit(unittest.TestCase):
    def test_whole_documents_and_fractions(self):
        p = pipeline()
        n_rows = 0
        for b in p:
            self.assertEqual(b.info["mode"], "bestfit")
            seg, mask = b.segment_ids, b.loss_mask
            # a row is documents, then padding (segment -1, mask 0)
            self.assertTrue(np.array_equal(seg >= 0, mask == 1))
            n_rows += b.tokens.shape[0]
        c = p.counts()
        m = p.metrics_snapshot()
        cat = pipeline("concat")
        for _ in cat:
            pass
        cc = cat.counts()
        self.assertEqual(c["samples"], cc["samples"])
        self.assertEqual(c["tokens"], cc["tokens"])  # every token once
        self.assertEqual(c["truncated_tokens"], 0)
        self.assertLess(c["cut_documents"], cc["cut_documents"])
        self.assertEqual(m["cut_documents"], c["cut_documents"])
        self.assertAlmostEqual(m["cut_fraction"], c["cut_documents"] / c["samples"])
        self.assertAlmostEqual(m["padding_fraction"],
                               c["pad_tokens"] / (c["tokens"] + c["pad_tokens"]))
        self.assertGreater(m["padding_fraction"], 0)
        # pad mode (one document per row) cuts exactly the documents longer
        # than a row: best-fit cuts those and no others
        pad = pipeline("pad")
        for _ in pad:
            pass
        self.assertEqual(c["cut_documents"], pad.counts()["cut_documents"])
        with self.assertRaisesRegex(Exception, "bestfit. only"):
            pipeline("concat").pack("concat", SEQ, window=4)
        with self.assertRaisesRegex(Exception, "window = 0"):
            Pipeline(WorkSource(Dataset(manifest()))).tokenize(
                tokenizer_id="gpt2", field="text").pack("bestfit", SEQ, window=0)

    def test_state_dict_inside_a_window_resumes_exactly(self):
        full = rows_of(pipeline())
        self.assertGreater(len(full), 20)
        for k in (3, 7, 18):
            p = pipeline()
            it = iter(p)
            for _ in range(k):
                next(it)
            state = p.state_dict()
            q = pipeline(state=state, threads=1)
            rest = rows_of(q)
            self.assertEqual(len(rest), len(full) - k)
            for (i, t, m, s), (j, t2, m2, s2) in zip(rest, full[k:]):
                self.assertEqual(i, j)
                self.assertTrue(np.array_equal(t, t2))
                self.assertTrue(np.array_equal(m, m2))
                self.assertTrue(np.array_equal(s, s2))
        # states inside windows name the rows delivered
        p = pipeline()
        it = iter(p)
        seen = 0
        for _ in range(len(full) - 1):
            next(it)
            seen += "window_rows" in p.state_dict()["ranks"][0]
        self.assertGreater(seen, 0)

    def test_equal_to_the_c_pipeline(self):
        want = zptest.c_digests(manifest(), "--tokenize", "gpt2", "--seed", "3",
                                "--microbatch", "4", "--seq-len", SEQ,
                                "--pack", "bestfit:16")
        got = [(b.index, b.epoch, b.digest()) for b in pipeline()]
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
