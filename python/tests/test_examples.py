"""Every Python example of the seed page and of docs/ runs as written.

The seed page (../shared/seed/, or SEED_DIR) lost its indentation when it
was saved as text; its examples are in docs/python.md with their
indentation, and this test checks that each seed example is there line for
line (ignoring only the leading whitespace) before running the docs'
version. seed_examples.txt keeps the page's four examples as the page has
them, for clones without the page beside them (when the page is there, the
two must agree). Each example runs in a fresh namespace in a folder whose data/ is a
generated dataset, after `work_source = WorkSource(Dataset("data/manifest.json"),
seed=1)`; a `pipeline` it leaves unstarted is iterated too.
"""
import contextlib
import io
import os
import re
import tempfile
import unittest
from pathlib import Path

import zptest

DOCS = zptest.REPO / "docs"
HERE_SEED = zptest.HERE / "seed_examples.txt"
CODE_LINE = re.compile(r'^(from |import |#|pipeline|Pipeline\(|\.|\)|for |if |print\(|def |"""|'
                       r"return )")


def seed_dir():
    for d in (os.environ.get("SEED_DIR"), zptest.REPO.parent / "shared" / "seed",
              zptest.REPO / "docs" / "seed"):
        if d and Path(d).is_dir() and list(Path(d).glob("*.txt")):
            return Path(d)
    return None


def seed_examples():
    """The code blocks of the seed page: from a docstring line to the last
    line that reads as code."""
    d = seed_dir()
    out = []
    for f in sorted(d.glob("*.txt")) if d else []:
        lines = f.read_text().splitlines()
        i = 0
        while i < len(lines):
            if re.match(r'^""".*"""$', lines[i]):
                j = i + 1
                while j < len(lines) and CODE_LINE.match(lines[j].strip()):
                    j += 1
                out.append(lines[i:j])
                i = j
            else:
                i += 1
    return out


def doc_examples():
    out = []
    for f in sorted(DOCS.glob("*.md")):
        for m in re.finditer(r"```python\n(.*?)```", f.read_text(), re.S):
            out.append((f.name, m.group(1)))
    return out


def stripped(code):
    return [ln.strip() for ln in code.splitlines() if ln.strip()]


PRELUDE = 'from zephon import Dataset, WorkSource\nwork_source = WorkSource(Dataset("data/manifest.json"), seed=1)\n'


class TestExamples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = zptest.small()

    def test_seed_examples_are_in_the_docs(self):
        kept = [b.splitlines() for b in (HERE_SEED.read_text().strip().split("\n\n"))]
        if seed_dir() is not None:
            self.assertEqual(seed_examples(), kept, "seed_examples.txt differs from the seed page")
        seeds = kept
        self.assertEqual(len(seeds), 4)
        docs = [stripped(code) for _, code in doc_examples()]
        for block in seeds:
            self.assertIn([ln.strip() for ln in block if ln.strip()], docs,
                          f"seed example not in docs/: {block[0]}")

    def test_docs_examples_run(self):
        examples = doc_examples()
        self.assertGreaterEqual(len(examples), 10)
        for name, code in examples:
            with self.subTest(doc=name, example=code.splitlines()[0]):
                self.run_example(code)

    def run_example(self, code):
        import zephon

        with tempfile.TemporaryDirectory() as d:
            os.symlink(self.data, Path(d) / "data")
            cwd = os.getcwd()
            os.chdir(d)
            try:
                ns = {"__name__": "__example__"}
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(PRELUDE, "<prelude>", "exec"), ns)
                    exec(compile(code, "<example>", "exec"), ns)
                    p = ns.get("pipeline")
                    if isinstance(p, zephon.Pipeline) and not p._started and p._address():
                        n = sum(1 for _ in p)
                        self.assertGreater(n, 0)
                    if isinstance(p, zephon.Pipeline):
                        p.close()
            finally:
                os.chdir(cwd)


if __name__ == "__main__":
    unittest.main()
