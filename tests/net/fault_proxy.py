#!/usr/bin/env python3
"""fault_proxy.py - the test suite's fault-injecting HTTP proxy (loopback only).

Forwards GET and HEAD to one upstream HTTP server (the tests' nginx) and relays status,
headers and body. A path of the form /f/<faults>/<path> serves <path> with faults;
<faults> is a comma list of kind[:arg][*count]:

    500, 503, 403, 404       that status with an HTML error page
    429:<s>                  status 429 with Retry-After: <s>
    reset:<b>                headers and <b> body bytes, then a connection reset (RST)
    stall:<b>                headers and <b> body bytes, then silence until the client
                             closes (at most 120 s)
    short:<b>                the full Content-Length declared, <b> bytes sent, then close
    badlen                   a Content-Length larger than the body, body sent, then close
    corrupt                  the body with some bytes flipped (same length)
    slowfirst:<ms>, delay:<ms>  wait before the status line
    slowdown:<r>             a request rate limit: r requests a second, a token bucket
                             shared by every path of the same fault list, refilled at r a
                             second and holding a burst of max(1, r/4) requests (a quarter
                             of a second of them; full at the first request); a request
                             with no token left is answered at once (no delay) 503 with
                             S3's SlowDown error and Retry-After: 1 (use *0: every request)

Each fault has its own counter per (fault list, real path) and applies to the first
<count> requests (default 1; 0 = every request). The timing kinds (slowfirst, delay)
combine with the others; of the remaining kinds at most one applies to a request: the
first in the list whose count is not used up. The body kinds (reset, stall, short, badlen,
corrupt) apply only to a GET answered 200/206 with a body, and only such a request uses
them up; the status kinds apply to GET and HEAD.

With --forward-all every request header is forwarded (Host, Authorization, x-amz-*
included) with the query string: a signed S3 request passes unchanged (the client
signs the proxy's address as Host), so the proxy can stand in front of the S3
server to count its requests; the path of a bucket listing is counted as /<bucket>.

Admin: GET /__stats -> {"GET": {path: n}, "HEAD": {path: n}, "bytes": {path: body bytes}},
counted per real path; GET /__events -> [[seconds, status, path], ...]: every request's
arrival (seconds since the proxy started) and the status answered, for rates; POST
/__reset clears the counts, the events and the fault counters. All three
take an optional ?prefix=/p/ limiting them to real paths starting with /p/ (so parallel
tests do not disturb each other).

Standard library only. One thread per connection (ThreadingHTTPServer); the shared
counters are guarded by one lock. Quiet: nothing on stdout; errors go to --log.
"""

import argparse
import http.client
import http.server
import json
import select
import socket
import struct
import sys
import threading
import time
import urllib.parse

CHUNK = 256 * 1024
STALL_CAP_S = 120.0
FORWARD_HEADERS = ("Range", "If-Range", "If-None-Match", "If-Modified-Since",
                   "If-Match", "If-Unmodified-Since")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "proxy-connection",
               "te", "trailer", "upgrade"}
STATUS_KINDS = {"500", "503", "403", "404", "429"}
RATE_KINDS = {"slowdown"}
SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 b'<Message>Please reduce your request rate.</Message></Error>')
MAX_EVENTS = 500000
# redirect: after the waits, 307 to the same path at the upstream (nginx), so
# that the bytes come from nginx while every request still pays the waits
REDIRECT_KINDS = {"redirect"}
BODY_KINDS = {"reset", "stall", "short", "badlen", "corrupt"}
TIMING_KINDS = {"slowfirst", "delay"}
NEEDS_ARG = {"429", "reset", "stall", "short", "slowfirst", "delay", "slowdown"}


class FaultError(ValueError):
    pass


def parse_faults(text):
    """'500*2,reset:100' -> [(kind, arg, count), ...]; raises FaultError."""
    faults = []
    for tok in text.split(","):
        if not tok:
            raise FaultError("empty fault in %r" % text)
        count = 1
        if "*" in tok:
            tok, _, c = tok.partition("*")
            if not c.isdigit():
                raise FaultError("bad count in %r" % text)
            count = int(c)
        kind, _, arg = tok.partition(":")
        if kind not in STATUS_KINDS | BODY_KINDS | TIMING_KINDS | REDIRECT_KINDS | RATE_KINDS:
            raise FaultError("unknown fault kind %r" % kind)
        if kind in NEEDS_ARG:
            if not arg.isdigit():
                raise FaultError("fault %r needs a number argument" % kind)
            arg = int(arg)
        elif arg:
            raise FaultError("fault %r takes no argument" % kind)
        else:
            arg = None
        faults.append((kind, arg, count))
    return faults


class State:
    """Counters shared by all handler threads, guarded by one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self, prefix=""):
        with self.lock:
            if not prefix:
                self.counts = {"GET": {}, "HEAD": {}}
                self.bytes = {}
                self.used = {}
                self.buckets = {}
                self.events = []
                return
            self.events = [e for e in self.events if not e[2].startswith(prefix)]
            for table in (self.counts["GET"], self.counts["HEAD"], self.bytes):
                for k in [k for k in table if k.startswith(prefix)]:
                    del table[k]
            for k in [k for k in self.used if k[1].startswith(prefix)]:
                del self.used[k]

    def count(self, method, path):
        with self.lock:
            table = self.counts.setdefault(method, {})
            table[path] = table.get(path, 0) + 1

    def add_bytes(self, path, n):
        if n:
            with self.lock:
                self.bytes[path] = self.bytes.get(path, 0) + n

    def over_rate(self, key, rate):
        """Token bucket `key` (rate a second, a burst of a quarter of a second of it): True
        when this request is over the rate (no token left)."""
        now = time.monotonic()
        cap = max(1.0, rate / 4.0)
        with self.lock:
            tokens, last = self.buckets.get(key, (cap, now))
            tokens = min(cap, tokens + (now - last) * rate)
            over = tokens < 1.0
            if not over:
                tokens -= 1.0
            self.buckets[key] = (tokens, now)
            return over

    def event(self, t, code, path):
        with self.lock:
            if len(self.events) < MAX_EVENTS:
                self.events.append((t, code, path))

    def take(self, key, count):
        """Uses one application of fault `key`; False when its count is used up."""
        with self.lock:
            used = self.used.get(key, 0)
            if count and used >= count:
                return False
            self.used[key] = used + 1
            return True

    def peek(self, key, count):
        with self.lock:
            return count == 0 or self.used.get(key, 0) < count

    def snapshot(self, prefix=""):
        with self.lock:
            def sel(t):
                return {k: v for k, v in sorted(t.items()) if k.startswith(prefix)}
            return {"GET": sel(self.counts["GET"]), "HEAD": sel(self.counts["HEAD"]),
                    "bytes": sel(self.bytes)}


ERROR_TITLES = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 429: "Too Many Requests",
                500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def version_string(self):
        return "zephon-fault-proxy"

    # ------------------------------------------------------------ plumbing
    def log_message(self, fmt, *args):  # quiet: no line per request
        pass

    def log_error(self, fmt, *args):
        self.server.log("%s %s" % (self.address_string(), fmt % args))

    def send_page(self, code, extra=(), head=False):
        title = ERROR_TITLES.get(code, "Error")
        body = ("<html><head><title>%d %s</title></head><body><h1>%d %s</h1>"
                "<p>zephon fault proxy</p></body></html>\n" % (code, title, code, title)
                ).encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def send_json(self, obj):
        body = (json.dumps(obj) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def hard_reset(self):
        """Closes the client connection with RST (SO_LINGER 0)."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.rfile.close()
            self.connection.close()
        except OSError:
            pass

    def wait_client_close(self):
        """Stall: sends nothing more until the client closes (at most STALL_CAP_S)."""
        self.close_connection = True
        end = time.monotonic() + STALL_CAP_S
        sock = self.connection
        while True:
            left = end - time.monotonic()
            if left <= 0 or self.server.stopping.is_set():
                return
            try:
                r, _, _ = select.select([sock], [], [], min(left, 1.0))
                if r and not sock.recv(65536):
                    return
            except OSError:
                return

    # ------------------------------------------------------------ admin
    def admin(self, method):
        url = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(url.query)
        prefix = q.get("prefix", [""])[0]
        if url.path == "/__stats" and method == "GET":
            self.send_json(self.server.state.snapshot(prefix))
        elif url.path == "/__events" and method == "GET":
            st = self.server.state
            with st.lock:
                ev = [[round(t - self.server.t0, 4), c, p] for t, c, p in st.events
                      if p.startswith(prefix)]
            self.send_json(ev)
        elif url.path == "/__reset" and method == "POST":
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            self.server.state.reset(prefix)
            self.send_json({"reset": prefix or "all"})
        else:
            self.send_page(404)

    # ------------------------------------------------------------ requests
    def do_POST(self):
        if self.path.startswith("/__"):
            self.admin("POST")
        else:
            self.close_connection = True
            self.send_page(403)

    def do_GET(self):
        self.serve("GET")

    def do_HEAD(self):
        self.serve("HEAD")

    def serve(self, method):
        if self.path.startswith("/__"):
            return self.admin(method)
        path = self.path
        faults, fault_text = [], ""
        if path.startswith("/f/"):
            fault_text, sep, rest = path[3:].partition("/")
            if not sep:
                self.close_connection = True
                return self.send_page(404, head=(method == "HEAD"))
            try:
                faults = parse_faults(fault_text)
            except FaultError as e:
                self.log_error("bad fault list: %s", e)
                self.close_connection = True
                return self.send_page(400, head=(method == "HEAD"))
            path = "/" + rest
        real = urllib.parse.urlsplit(path).path
        st = self.server.state
        st.count(method, real)
        arrival = time.monotonic()

        # which faults this request gets
        wait_ms = self.server.delay_ms
        outcome = None
        for i, (kind, arg, count) in enumerate(faults):
            key = (fault_text, real, i)
            if kind in TIMING_KINDS:
                if st.take(key, count):
                    wait_ms += arg
            elif outcome is None and kind in RATE_KINDS:
                if st.peek(key, count) and st.over_rate(fault_text, arg):
                    st.take(key, count)
                    outcome = (kind, arg)
            elif outcome is None and st.peek(key, count):
                if kind in STATUS_KINDS or kind in REDIRECT_KINDS:
                    st.take(key, count)
                    outcome = (kind, arg)
                elif method == "GET":
                    outcome = (kind, arg, key, count)  # taken once the body is known
        if outcome and outcome[0] in RATE_KINDS:
            wait_ms = 0  # refused at once, as a store does
        if wait_ms:
            time.sleep(wait_ms / 1000.0)
        head = method == "HEAD"
        if outcome and outcome[0] in REDIRECT_KINDS:
            up = self.server.upstream
            self.send_response(307)
            self.send_header("Location", "%s://%s%s" % (up.scheme, up.netloc, path))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if outcome and outcome[0] in RATE_KINDS:
            st.event(arrival, 503, real)
            self.send_response(503, "Slow Down")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SLOWDOWN_BODY)))
            self.send_header("Retry-After", "1")
            self.end_headers()
            if not head:
                self.wfile.write(SLOWDOWN_BODY)
            return
        if outcome and outcome[0] in STATUS_KINDS:
            code = int(outcome[0])
            st.event(arrival, code, real)
            extra = [("Retry-After", str(outcome[1]))] if code == 429 else []
            return self.send_page(code, extra, head)

        # forward upstream
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port or 80, timeout=60)
        try:
            if self.server.forward_all:
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            else:
                hdrs = {k: self.headers[k] for k in FORWARD_HEADERS if self.headers[k]}
            conn.request(method, path, headers=hdrs)
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            self.log_error("upstream %s %s: %s", method, path, e)
            self.close_connection = True
            return self.send_page(502, head=head)
        st.event(arrival, resp.status, real)
        try:
            self.relay(resp, real, head, outcome)
        finally:
            conn.close()

    def relay(self, resp, real, head, outcome):
        st = self.server.state
        clen = resp.getheader("Content-Length")
        length = int(clen) if clen is not None and clen.isdigit() else None
        kind = arg = None
        if (outcome and not head and resp.status in (200, 206) and length
                and self.server.state.take(outcome[2], outcome[3])):
            kind, arg = outcome[0], outcome[1]
        self.send_response_only(resp.status, resp.reason)
        for k, v in resp.getheaders():
            lk = k.lower()
            if lk in HOP_HEADERS or lk in ("content-length", "server", "date"):
                continue
            self.send_header(k, v)
        self.send_header("Date", self.date_time_string())
        if kind == "badlen":
            self.send_header("Content-Length", str(length + 1000))
        elif length is not None:
            self.send_header("Content-Length", str(length))
        elif not head and resp.status not in (204, 304):
            self.close_connection = True  # no length: the close ends the body
        if kind in ("badlen", "short", "reset", "stall"):
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if head:
            return
        limit = None
        if kind in ("reset", "stall"):
            limit = min(arg, length)
        elif kind == "short":
            limit = min(arg, length - 1)
        sent = 0
        try:
            while limit is None or sent < limit:
                want = CHUNK if limit is None else min(CHUNK, limit - sent)
                data = resp.read(want)
                if not data:
                    break
                if kind == "corrupt":
                    data = corrupt(data, sent)
                self.wfile.write(data)
                sent += len(data)
        except OSError:
            self.close_connection = True  # the client went away: normal under faults
        finally:
            st.add_bytes(real, sent)
        if kind == "reset":
            self.hard_reset()
        elif kind == "stall":
            self.wait_client_close()
        elif length is not None and sent < length and kind is None:
            self.close_connection = True  # upstream ended early


def corrupt(data, offset):
    """Flips the byte at every absolute offset that is a multiple of 4096."""
    b = bytearray(data)
    first = (-offset) % 4096
    for i in range(first, len(b), 4096):
        b[i] ^= 0xFF
    return bytes(b)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr, upstream, delay_ms, logfile, forward_all=False):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.forward_all = forward_all
        self.delay_ms = delay_ms
        self.state = State()
        self.t0 = time.monotonic()
        self.stopping = threading.Event()
        self.logfile = logfile
        self.loglock = threading.Lock()
        super().__init__(addr, Handler)

    def log(self, msg):
        line = "%s %s\n" % (time.strftime("%H:%M:%S"), msg)
        with self.loglock:
            if self.logfile:
                with open(self.logfile, "a") as f:
                    f.write(line)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        self.log("error with %s: %r" % (client_address, exc))


def main():
    ap = argparse.ArgumentParser(description="fault-injecting HTTP proxy for the tests")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT")
    ap.add_argument("--delay-ms", type=int, default=0, help="wait added to every request")
    ap.add_argument("--log", default=None, help="error log file")
    ap.add_argument("--forward-all", action="store_true",
                    help="forward every request header (signed S3 requests)")
    a = ap.parse_args()
    srv = Server((a.bind, a.port), a.upstream, a.delay_ms, a.log, a.forward_all)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stopping.set()
        srv.server_close()


if __name__ == "__main__":
    main()
