"""Attention-cost balance from Python (Pipeline.balance(K), docs/packing.md):
each window of K batches holds exactly the rows of the unbalanced stream's
window, its costliest batch no costlier, the max/mean ratios are in counts()
and metrics_snapshot(), a state_dict taken inside a window resumes
byte-identically, and the batches equal the C pipeline's (zephon run
--balance K)."""
import unittest

import zptest

import numpy as np

from zephon import Dataset, Pipeline, WorkSource

SEQ = 255
K = 4


def manifest():
    return str(zptest.small() / "manifest.json")


def pipeline(balance=K, state=None, threads=2, mode="concat"):
    p = (Pipeline(WorkSource(Dataset(manifest()), seed=3), threads=threads)
         .tokenize(tokenizer_id="gpt2", field="text").batch(microbatch_size=4)
         .pack(mode, SEQ).balance(balance))
    p.enable_observability()
    if state is not None:
        p.load_state_dict(state)
    return p


def cost(seg):
    """A row's attention cost: the squared lengths of its documents' input runs."""
    s = seg[:-1]
    edges = np.flatnonzero(np.diff(s)) + 1
    total = 0
    for run in np.split(s, edges):
        if run[0] >= 0:
            total += len(run) ** 2
    return total


def windows(p):
    """Per window of K batches: the sorted rows (bytes) and the costliest batch."""
    out, rows, top = [], [], 0
    n = 0
    for b in p:
        rows += [b.tokens[r].tobytes() + b.segment_ids[r].tobytes() for r in range(b.tokens.shape[0])]
        top = max(top, sum(cost(b.segment_ids[r]) for r in range(b.tokens.shape[0])))
        n += 1
        if n == K or b.info["last_in_epoch"]:
            out.append((sorted(rows), top))
            rows, top, n = [], 0, 0
    return out


class TestBalance(unittest.TestCase):
    def test_same_rows_cheaper_top(self):
        plain, bal = pipeline(0), pipeline()
        wp, wb = windows(plain), windows(bal)
        self.assertEqual(len(wp), len(wb))
        self.assertGreater(len(wb), 3)
        lower = 0
        for (rp, tp), (rb, tb) in zip(wp, wb):
            self.assertEqual(rp, rb)  # every row once, in the same window
            self.assertLessEqual(tb, tp)
            lower += tb < tp
        self.assertGreater(lower, 0)
        c, cp = bal.counts(), plain.counts()
        for k in ("samples", "tokens", "pad_tokens", "cut_documents", "batches"):
            self.assertEqual(c[k], cp[k])
        self.assertEqual(c["balance_windows"], len(wb))
        self.assertEqual(cp["balance_windows"], 0)
        m = bal.metrics_snapshot()
        self.assertAlmostEqual(m["attn_imbalance_before"], c["attn_peak_before"] / c["attn_cost"])
        self.assertAlmostEqual(m["attn_imbalance_after"], c["attn_peak_after"] / c["attn_cost"])
        self.assertLess(m["attn_imbalance_after"], m["attn_imbalance_before"])
        self.assertGreaterEqual(m["attn_imbalance_after"], 1.0)
        with self.assertRaisesRegex(Exception, "window = 5000"):
            pipeline(5000)
        with self.assertRaisesRegex(Exception, "needs a tokenize operator"):
            p = Pipeline(WorkSource(Dataset(manifest()))).balance(4)
            next(iter(p))

    def test_state_dict_inside_a_window_resumes_exactly(self):
        full = [(b.index, b.tokens.copy(), b.segment_ids.copy()) for b in pipeline(mode="bestfit")]
        for k in (2, 5, 11):
            p = pipeline(mode="bestfit")
            it = iter(p)
            for _ in range(k):
                next(it)
            state = p.state_dict()
            self.assertEqual(state["ranks"][0].get("balance_done", 0), k % K)
            rest = [(b.index, b.tokens.copy(), b.segment_ids.copy())
                    for b in pipeline(mode="bestfit", state=state, threads=1)]
            self.assertEqual(len(rest), len(full) - k)
            for (i, t, s), (j, t2, s2) in zip(rest, full[k:]):
                self.assertEqual(i, j)
                self.assertTrue(np.array_equal(t, t2))
                self.assertTrue(np.array_equal(s, s2))

    def test_equal_to_the_c_pipeline(self):
        want = zptest.c_digests(manifest(), "--tokenize", "gpt2", "--seed", "3",
                                "--microbatch", "4", "--seq-len", SEQ, "--balance", K)
        got = [(b.index, b.epoch, b.digest()) for b in pipeline()]
        self.assertEqual(got, want)


if __name__ == "__main__":
    unittest.main()
