"""Python map_transform under the thread and the process runner: identical
output, errors naming the record, crashed workers, and no leftovers (shared
memory, processes) after a normal exit, an exception, SIGINT or kill -9."""
import ctypes
import os
import signal
import subprocess
import sys
import time
import unittest

import zptest

import zephon
from zephon import Dataset, Pipeline, WorkSource


def manifest():
    return str(zptest.small() / "manifest.json")


def clean_text(payload):
    """Strip the surrounding whitespace the crawler left behind."""
    return {"text": payload["text"].strip()}


def upper_odd_drop_7(payload):
    if payload["id"] % 7 == 0:
        return None
    return {"id": payload["id"], "text": payload["text"].upper() + " \u00e9\U0001f600"}


def fails_on_42(payload):
    if payload["id"] == 42:
        raise ValueError(f"no thanks: {payload['id']}")
    return payload


def returns_list(payload):
    return [payload]


def too_big_for_the_worker(payload):
    """Record 5's result cannot reach the parent: the worker's files may not
    grow past 2 MiB (its shared memory is a file), so the worker gives up."""
    if payload["id"] == 5:
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, resource.RLIM_INFINITY))
        return {"text": "x" * (4 << 20)}
    return payload


def digests(fn, runner, parallelism=2, src=None, tokenize=True, pack="concat", **kw):
    p = Pipeline(WorkSource(Dataset(src or manifest()), seed=9), **kw)
    p.map_transform(fn, parallelism=parallelism)
    if tokenize:
        p.tokenize(tokenizer_id="gpt2", field="text").pack(pack, 127)
    p.batch(microbatch_size=4).options(runner=runner)
    with p:
        return [b.digest() for b in p], p.counts()


class TestRunnersAgree(unittest.TestCase):
    def test_byte_identical_tokens(self):
        t, tc = digests(clean_text, "thread")
        p, pc = digests(clean_text, "process")
        p3, _ = digests(clean_text, "process", parallelism=3)
        self.assertEqual(t, p)
        self.assertEqual(t, p3)
        self.assertEqual(tc, pc)
        # the transform changes the stream (it ran)
        plain = Pipeline(WorkSource(Dataset(manifest()), seed=9)).tokenize().pack(
            "concat", 127).batch(microbatch_size=4)
        self.assertNotEqual([b.digest() for b in plain], t)

    def test_two_transforms(self):
        """Two map_transforms, 2 and 3 workers: the same as the thread
        runner, and close() ends every worker promptly (each sees end of
        file on its pipe: no other worker holds it)."""
        def run(runner):
            p = (Pipeline(WorkSource(Dataset(manifest()), seed=2))
                 .map_transform(upper_odd_drop_7, parallelism=3)
                 .map_transform(clean_text, parallelism=2)
                 .batch(microbatch_size=5).options(runner=runner).enable_observability())
            d = [b.digest() for b in p]
            pids = [pid for r in p.metrics_snapshot()["runners"] for pid in r.get("worker_pids", [])]
            t0 = time.time()
            p.close()
            return d, pids, time.time() - t0

        t, _, _ = run("thread")
        p, pids, secs = run("process")
        self.assertEqual(t, p)
        self.assertEqual(len(pids), 5)
        self.assertLess(secs, 1.5)  # not the 2 s SIGKILL fallback
        for pid in pids:
            self.assertFalse(os.path.exists(f"/proc/{pid}"), pid)

    def test_byte_identical_records_with_drops_and_unicode(self):
        t, tc = digests(upper_odd_drop_7, "thread", tokenize=False)
        p, pc = digests(upper_odd_drop_7, "process", tokenize=False)
        self.assertEqual(t, p)
        self.assertEqual(tc["filtered"], pc["filtered"])
        self.assertEqual(tc["filtered"], sum(1 for i in range(600) if i % 7 == 0))

    def test_text_records_without_json(self):
        h5 = zptest.tmpdir() / "t.h5"
        if not h5.exists():
            subprocess.run([zptest.zephon_bin(), "gen", "--format", "h5", "--out", str(h5),
                            "--shards", "2", "--samples-per-shard", "100", "--features", "0"],
                           check=True, stdout=subprocess.DEVNULL)

        def shout(payload):
            return {"text": payload["text"].upper()}

        t, _ = digests(shout, "thread", src=str(h5), pack="pad")
        p, _ = digests(shout, "process", src=str(h5), pack="pad")
        self.assertEqual(t, p)

    def test_observability_across_processes(self):
        p = (Pipeline(WorkSource(Dataset(manifest())))
             .map_transform(clean_text, parallelism=2).tokenize()
             .batch(microbatch_size=4).options(runner="process").enable_observability())
        with p:
            for _ in p:
                pass
            m = p.metrics_snapshot()
        r = m["runners"][0]
        self.assertEqual(r["runner"], "process")
        self.assertEqual(r["records"], 600)
        self.assertGreater(r["worker_busy_seconds"], 0)
        self.assertGreaterEqual(r["round_trip_seconds"], r["worker_busy_seconds"])
        self.assertEqual(len(r["worker_pids"]), 2)
        names = [o["name"] for o in m["operators"]]
        self.assertIn("clean_text", names)


class TestRunnerErrors(unittest.TestCase):
    def check_error(self, runner):
        with self.assertRaises(zephon.Error) as cm:
            digests(fails_on_42, runner)
        msg = str(cm.exception)
        self.assertIn("ValueError: no thanks: 42", msg)
        self.assertIn("shard", msg)
        self.assertIn("line 43", msg)  # record 42 of its shard
        self.assertIn("fails_on_42", msg)

    def test_raise_thread(self):
        self.check_error("thread")

    def test_raise_process(self):
        self.check_error("process")

    def test_wrong_return_type(self):
        for runner in ("thread", "process"):
            with self.assertRaises(zephon.Error) as cm:
                digests(returns_list, runner)
            self.assertIn("returned list", str(cm.exception))

    def test_worker_that_gives_up_says_why(self):
        # it used to be "worker process N exited with status 1", nothing more
        with self.assertRaises(zephon.Error) as cm:
            digests(too_big_for_the_worker, "process", parallelism=1, tokenize=False)
        msg = str(cm.exception)
        self.assertIn("worker process", msg)
        self.assertIn("cannot grow the shared memory", msg)
        self.assertIn("File too large", msg)

    def test_skip_policy_skips_raising_records(self):
        t, tc = digests(fails_on_42, "thread", on_bad_record="skip")
        p, pc = digests(fails_on_42, "process", on_bad_record="skip")
        self.assertEqual(t, p)
        self.assertEqual(tc["skipped"], 1)
        self.assertEqual(pc["skipped"], 1)


SCRIPT = """
import os, sys, time
import zephon
from zephon import Dataset, Pipeline, WorkSource
def clean_text(payload):
    if payload["id"] == int(os.environ.get("CRASH_AT", "-1")):
        os.kill(os.getpid(), 9)
    return {"text": payload["text"].strip()}
p = (Pipeline(WorkSource(Dataset(sys.argv[1])), epochs=0)
     .map_transform(clean_text, parallelism=2).tokenize()
     .batch(microbatch_size=2).options(runner="process", prefetch_batches=1).enable_observability())
for i, b in enumerate(p):
    if i == 0:
        print(*p.metrics_snapshot()["runners"][0]["worker_pids"], flush=True)
    if i == 3 and os.environ.get("MODE") == "raise":
        raise RuntimeError("the training loop failed")
    if i == 3 and os.environ.get("MODE") == "exit":
        break
    time.sleep(0.02)
print("end", flush=True)
"""

PR_SET_CHILD_SUBREAPER = 36


def shm_entries():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except FileNotFoundError:
        return False


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class TestCleanup(unittest.TestCase):
    """Orphaned workers are re-parented to this test process (a subreaper),
    so the test sees whether they end, and reaps them."""

    @classmethod
    def setUpClass(cls):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    def scenario(self, mode, sig=None, crash_at=None):
        before = shm_entries()
        env = dict(os.environ, MODE=mode)
        if crash_at is not None:
            env["CRASH_AT"] = str(crash_at)
        proc = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; sys.path.insert(0, %r)\n" % os.environ.get("ZEPHON_PYTHONPATH", "")
             + SCRIPT, manifest()],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        pids = [int(x) for x in proc.stdout.readline().split()]
        if crash_at is None:
            self.assertEqual(len(pids), 2, proc.stderr.read() if not pids else "")
        if sig is not None:
            time.sleep(0.3)
            proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            self.fail(f"{mode}: the process did not end: {err[-2000:]}")
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in pids):
            reap()
            time.sleep(0.05)
        reap()
        self.assertEqual([p for p in pids if alive(p)], [], f"{mode}: workers left running")
        self.assertEqual(shm_entries() - before, set(), f"{mode}: /dev/shm entries left")
        return proc.returncode, err

    def test_normal_exit(self):
        rc, err = self.scenario("exit")
        self.assertEqual(rc, 0, err)

    def test_exception(self):
        rc, err = self.scenario("raise")
        self.assertEqual(rc, 1)
        self.assertIn("the training loop failed", err)

    def test_sigint(self):
        rc, err = self.scenario("run", sig=signal.SIGINT)
        self.assertNotEqual(rc, 0)
        self.assertIn("KeyboardInterrupt", err)

    def test_kill_9_of_the_parent(self):
        rc, _ = self.scenario("run", sig=signal.SIGKILL)
        self.assertEqual(rc, -9)

    def test_crashed_worker_is_an_error_not_a_hang(self):
        rc, err = self.scenario("run", crash_at=77)
        self.assertEqual(rc, 1)
        self.assertIn("worker process", err)
        self.assertIn("killed by signal 9", err)
        self.assertIn("zephon._core.Error", err)


if __name__ == "__main__":
    unittest.main()
