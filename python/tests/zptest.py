"""Shared fixtures of the Python tests: the zephon command (ZEPHON_BIN) and
datasets it generates, made once per test process."""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
if "ZEPHON_PYTHONPATH" in os.environ:
    sys.path.insert(0, os.environ["ZEPHON_PYTHONPATH"])


def zephon_bin():
    b = os.environ.get("ZEPHON_BIN")
    if b:
        return b
    for d in ("build/dev", "build/test-release", "build/release"):
        p = REPO / d / "zephon"
        if p.exists():
            return str(p)
    raise RuntimeError("set ZEPHON_BIN to the zephon command")


_tmp = None


def tmpdir():
    global _tmp
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="zp-py-")
        import atexit

        atexit.register(shutil.rmtree, _tmp, True)
    return Path(_tmp)


def gen(name, *args):
    """A generated dataset (folder with manifest.json), made once."""
    out = tmpdir() / name
    if not (out / "manifest.json").exists():
        subprocess.run([zephon_bin(), "gen", "--out", str(out), *args], check=True,
                       stdout=subprocess.DEVNULL)
    return out


def small():
    """4 JSONL shards x 150 records (unequal text lengths)."""
    return gen("small", "--format", "jsonl", "--shards", "4", "--samples-per-shard", "150",
               "--seed", "7")


def run_cli(*args):
    return subprocess.run([zephon_bin(), "run", *map(str, args)], check=True,
                          capture_output=True, text=True)


def c_digests(manifest, *args):
    """[(index, epoch, digest)] of `zephon run ... --emit-digest`."""
    f = tmpdir() / "c.digest"
    run_cli(manifest, *args, "--emit-digest", f)
    out = []
    for line in f.read_text().splitlines():
        i, e, d = line.split()
        out.append((int(i), int(e), int(d, 16)))
    return out
