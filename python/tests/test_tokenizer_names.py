"""Tokenizer names and settings through the Python API (issue 21): the ids
and paths zephon run takes, eot/bos overrides, the tokenizer's identity, a
Megatron data path prefix, a run refused for shards of another tokenizer."""
import json
import subprocess
import unittest

import zptest  # noqa: F401  (sets sys.path)

import numpy as np

import zephon
from zephon import Dataset, Pipeline, WorkSource

DOCS = ["hello world", "abc", "Zephon packs documents."]


def docs_file():
    d = zptest.tmpdir() / "tokenizer_names"
    d.mkdir(exist_ok=True)
    p = d / "docs.jsonl"
    p.write_text("".join(json.dumps({"text": t}) + "\n" for t in DOCS))
    return d, p


def stream(spec, **tok):
    ws = WorkSource(Dataset(str(spec)), shuffle=False)
    p = Pipeline(ws).tokenize(field="text", **tok).batch(microbatch_size=1).pack("concat", 63)
    out = []
    for b in p:
        t = np.asarray(b.tokens)
        m = np.asarray(b.loss_mask)
        out.extend(int(x) for x in t[m.astype(bool)])
    return p, out


class TestTokenizerNames(unittest.TestCase):
    def test_bos_and_eot_overrides(self):
        _, docs = docs_file()
        p, plain = stream(docs, tokenizer_id="gpt2")
        self.assertEqual(p.eot, 50256)
        self.assertEqual(p.bos, -1)
        self.assertEqual(p.tokenizer_ident, "gpt2")
        self.assertEqual(plain.count(50256), len(DOCS))
        p, framed = stream(docs, tokenizer_id="gpt2", bos=1000, eot=2000)
        self.assertEqual((p.bos, p.eot), (1000, 2000))
        # BOS ids EOT per document: the same ids, framed
        want = []
        it = iter(plain)
        for _ in DOCS:
            want.append(1000)
            for x in it:
                if x == 50256:
                    break
                want.append(x)
            want.append(2000)
        self.assertEqual(framed, want)
        with self.assertRaises(zephon.Error) as e:
            stream(docs, tokenizer_id="gpt2", bos=50257)
        self.assertIn("bos = 50257", str(e.exception))

    def test_megatron_prefix_and_recorded_tokenizer(self):
        d, docs = docs_file()
        out = d / "mega"
        subprocess.run([zptest.zephon_bin(), "preprocess", "--out", str(out), "--format",
                        "megatron", "--force", "--quiet", str(docs)], check=True,
                       capture_output=True)
        self.assertEqual((out / "docs.tokenizer").read_text(), "gpt2\n")
        _, plain = stream(docs, tokenizer_id="gpt2")
        _, from_prefix = stream(out / "docs", tokenizer_id="gpt2")
        self.assertEqual(from_prefix, plain)
        with self.assertRaises(zephon.Error) as e:
            stream(out / "docs", tokenizer_id="cl100k_base")
        self.assertIn("'gpt2'", str(e.exception))
        self.assertIn("'cl100k_base'", str(e.exception))


if __name__ == "__main__":
    unittest.main()
