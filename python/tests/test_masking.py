"""Document-masking outputs (Pipeline.doc_masking, docs/packing.md):
position_ids, cu_seqlens, max_seqlen and doc_counts as zero-copy views,
equal to the C pipeline's, and attention over a packed row under the
block-diagonal causal mask equal to attention over each document alone.

The attention check is NumPy (it runs in every virtual environment); the
torch examples of docs/python.md run in test_examples."""
import unittest

import zptest

import numpy as np

from zephon import Dataset, Pipeline, WorkSource


def manifest():
    return str(zptest.small() / "manifest.json")


def pipeline(positions="restart", mode="concat", seq_len=127, **kw):
    return (Pipeline(WorkSource(Dataset(manifest()), seed=3), threads=2)
            .tokenize(tokenizer_id="gpt2", field="text").batch(microbatch_size=4)
            .pack(mode, seq_len).doc_masking(positions=positions, **kw))


def causal_attention(x):
    """softmax(x x^T / sqrt(d)) x with a causal mask, one sequence [n, d]."""
    s = x @ x.T / np.sqrt(x.shape[1])
    s = np.where(np.tril(np.ones(s.shape, dtype=bool)), s, -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ x


def masked_attention(x, mask):
    """The same over a whole row [S, d] under a boolean [S, S] mask."""
    s = np.where(mask, x @ x.T / np.sqrt(x.shape[1]), -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)) @ x


class TestMasking(unittest.TestCase):
    def test_views_and_their_meaning(self):
        n = 0
        for b in pipeline():
            seg, pos = b.segment_ids, b.position_ids
            cu, counts = b.cu_seqlens, b.doc_counts
            self.assertEqual(pos.dtype, np.int32)
            self.assertEqual(pos.shape, b.tokens.shape)
            self.assertEqual(cu.dtype, np.int32)
            self.assertEqual(counts.shape, (b.tokens.shape[0],))
            self.assertFalse(pos.flags.owndata)  # views of the batch's memory
            self.assertFalse(cu.flags.owndata)
            rows, cols = b.tokens.shape
            # position ids restart at every segment change
            starts = np.ones_like(seg, dtype=bool)
            starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
            for r in range(rows):
                p = 0
                for c in range(cols):
                    p = 0 if starts[r, c] else p + 1
                    self.assertEqual(pos[r, c], p)
            # cu_seqlens: the starts among the inputs, flattened, then the end
            inp = starts[:, :-1]
            want = [r * (cols - 1) + c for r in range(rows) for c in range(cols - 1) if inp[r, c]]
            self.assertEqual(cu.tolist(), want + [rows * (cols - 1)])
            self.assertEqual(b.max_seqlen, int(np.diff(cu).max()))
            docs = [int(sum(1 for c in range(cols - 1) if inp[r, c] and seg[r, c] >= 0))
                    for r in range(rows)]
            self.assertEqual(counts.tolist(), docs)
            n += 1
        self.assertGreater(n, 10)

    def test_attention_with_the_mask_equals_each_document_alone(self):
        rng = np.random.default_rng(5)
        emb = rng.standard_normal((50257, 16))
        checked = 0
        for b in pipeline(seq_len=63):
            seg = b.segment_ids[:, :-1]
            x = emb[b.inputs]  # [rows, S, d]
            cu = b.cu_seqlens
            flat = x.reshape(-1, x.shape[-1])
            alone = np.concatenate([causal_attention(flat[a:e]) for a, e in zip(cu[:-1], cu[1:])])
            S = seg.shape[1]
            causal = np.tril(np.ones((S, S), dtype=bool))
            packed = np.concatenate([
                masked_attention(x[r], (seg[r][:, None] == seg[r][None, :]) & causal)
                for r in range(seg.shape[0])])
            np.testing.assert_allclose(packed, alone, rtol=1e-9, atol=1e-9)
            # without the mask the rows holding two documents differ
            plain = np.concatenate([masked_attention(x[r], causal) for r in range(seg.shape[0])])
            if (b.doc_counts > 1).any():
                self.assertFalse(np.allclose(plain, alone))
                checked += 1
            if checked >= 5:
                break
        self.assertEqual(checked, 5)

    def test_continued_positions(self):
        prev = None
        cont = 0
        for b in pipeline(positions="continue"):
            pos, seg, tok = b.position_ids, b.segment_ids, b.tokens
            for r in range(tok.shape[0]):
                if prev is not None and seg[r, 0] >= 0 and tok[r, 0] == prev[0]:
                    lone_eot = tok[r, 0] == 50256 and seg[r, 1] != seg[r, 0]
                    # the carried token keeps its position unless it is the
                    # previous document's EOT alone
                    self.assertEqual(pos[r, 0], 0 if lone_eot else prev[1])
                    cont += not lone_eot and prev[1] > 0
                prev = (tok[r, -1], pos[r, -1]) if seg[r, -1] >= 0 else None
        self.assertGreater(cont, 10)

    def test_equal_to_the_c_pipeline_and_pad_mode(self):
        for positions, flag in (("restart", "--doc-masking"), ("continue", "--doc-masking=continue")):
            want = zptest.c_digests(manifest(), "--seed", 3, "--tokenize", "gpt2", "--microbatch",
                                    4, "--seq-len", 127, flag)
            got = [(b.index, b.epoch, b.digest()) for b in pipeline(positions)]
            self.assertEqual(got, want)
        for b in pipeline(mode="pad", seq_len=31):
            filled = b.info["rows_filled"]
            self.assertTrue((b.doc_counts[:filled] == 1).all())
            m = b.loss_mask.astype(bool)
            self.assertTrue((b.position_ids[m] == np.nonzero(m)[1]).all())

    def test_only_what_is_asked(self):
        b = next(iter(pipeline(position_ids=False, doc_counts=False)))
        self.assertEqual(b.cu_seqlens[0], 0)
        with self.assertRaises(AttributeError):
            b.position_ids
        with self.assertRaises(AttributeError):
            b.doc_counts
        self.assertEqual(b.info["masking"], ["cu_seqlens"])
        plain = (Pipeline(WorkSource(Dataset(manifest()), seed=3))
                 .tokenize(tokenizer_id="gpt2", field="text").batch(microbatch_size=4))
        b = next(iter(plain))
        with self.assertRaises(AttributeError):
            b.cu_seqlens
        with self.assertRaises(ValueError):
            pipeline(positions="sideways")


if __name__ == "__main__":
    unittest.main()
