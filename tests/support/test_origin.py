#!/usr/bin/env python3
"""The project's test origin for the HTTP mirror: deterministic objects, ETag,
Last-Modified, single byte ranges, Cache-Control chosen by the test, faults on demand,
and an access log with one line per request (method, path, range) so tests can count
origin requests.

    test_origin.py --port 0 --port-file F --log FILE [--files DIR]

Paths:
  /gen/<size>[/<name>]   <size> bytes (K/M/G suffixes) of a pattern seeded by the path
  /files/<name>          a file under --files
Query parameters (any path):
  cc=<value>             Cache-Control header (default: max-age=3600)
  fault=500|reset|truncate|hang|slow|cookie|fin|rst|chunkcut|silence|long|badhead
      500: status 500; reset: close the connection after half the body; truncate: declare
      the full length, send half and close; hang: never answer; slow: 64 KiB every 50 ms;
      cookie: add Set-Cookie (uncacheable);
      fin: declare the length, send half, FIN; rst: the same ending in a TCP RST;
      chunkcut: a chunked body cut after half, without its last chunk, then FIN;
      silence: declare the length, send half, then say nothing (the connection stays open);
      long: send 100 bytes more than the declared length, in the body's last write;
      badhead: a malformed response head
  once=1                 the fault happens on the first request for this path only (the
                         origin "recovers": later requests get the whole object)
  pace=<ms>              sleep this long after every 64 KiB of body (clients can join a fill)
  chunked=1              send the body chunked (no Content-Length)
  fail_if=<file>         answer 500 while <file> exists
  vary=<names>           a Vary header with <names>; the body and ETag differ for each value of
                         the named request headers
  rev=<file>             the object's version is <file>'s content (none: ""): the body and ETag
                         change with it, Last-Modified is its mtime, X-Origin-Rev names it
  slow304=<ms>           wait this long before answering 304 (clients can pile up behind it)
  tags=<words>           a Surrogate-Key header with them (xkey=<words>: an xkey header)
Conditional GETs: If-None-Match matching the ETag (else If-Modified-Since not before
Last-Modified) is answered 304 with the validators, Cache-Control and X-Validated (how many
304s this path got so far). The log line of a request carrying either ends in " cond".
"""
import socket
import struct
import argparse
import email.utils
import hashlib
import http.server
import os
import socketserver
import sys
import threading
import time
import urllib.parse

LOG_LOCK = threading.Lock()
FAULTED = set()  # paths whose once=1 fault has happened
VALIDATED = {}  # path -> 304s answered
ARGS = None
BOOT = time.time()


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in mult:
        return int(text[:-1]) * mult[text[-1].upper()]
    return int(text)


def pattern(path, start, length):
    """Bytes [start, start+length) of the object at `path`: blocks of sha256(path, block)."""
    out = bytearray()
    block = start // 32
    skip = start % 32
    while len(out) < length + skip:
        out += hashlib.sha256(f"{path}:{block}".encode()).digest()
        block += 1
    return bytes(out[skip:skip + length])


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _log(self):
        with LOG_LOCK:
            with open(ARGS.log, "a") as f:
                cond = ("If-None-Match" in self.headers or
                        "If-Modified-Since" in self.headers)
                f.write(f"{self.command} {self.path} {self.headers.get('Range', '-')} "
                        f"{self.client_address[1]}{' cond' if cond else ''}\n")

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def do_POST(self):
        self._log()
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _serve(self, head):
        self._log()
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        fault = q.get("fault", "")
        if q.get("once") == "1":
            with LOG_LOCK:
                if url.path in FAULTED:
                    fault = ""
                else:
                    FAULTED.add(url.path)
        pace = int(q.get("pace", "0")) / 1000.0
        if fault == "badhead":
            time.sleep(pace * 8)  # (with pace: late, so other clients wait for it)
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nBad Header\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if fault == "hang":
            time.sleep(3600)
            return
        if fault == "splithead":  # a /gen/SIZE answer whose head and body come in pieces
            body = b"s" * parse_size(url.path.split("/")[2])
            raw = (f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n"
                   f"X-Pad: {'p' * 3000}\r\n\r\n").encode()
            for piece in [raw[i:i + 700] for i in range(0, len(raw), 700)] + [
                    body[:len(body) // 2], body[len(body) // 2:]]:
                self.wfile.write(piece)
                self.wfile.flush()
                time.sleep(0.005)
            return
        if q.get("fail_if") and os.path.exists(q["fail_if"]):
            fault = "500"  # (a health probe's target the test turns bad and good again)
        if fault == "500":
            body = b"origin error\n"
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)
            return
        parts = url.path.split("/")
        if len(parts) >= 3 and parts[1] == "gen":
            size = parse_size(parts[2])
            content = None
        elif len(parts) >= 3 and parts[1] == "files" and ARGS.files:
            p = os.path.join(ARGS.files, "/".join(parts[2:]))
            if not os.path.isfile(p):
                self.send_error(404)
                return
            content = open(p, "rb")  # read piece by piece below
            size = os.path.getsize(p)
        else:
            self.send_error(404)
            return
        # vary=<names>: a Vary header, and a body (and ETag) of its own for each value of
        # the named request headers.
        seed = url.path
        for name in q.get("vary", "").split(","):
            if name.strip() and name.strip() != "*":
                seed += "|" + (self.headers.get(name.strip()) or "")
        rev, modified = "", BOOT
        if q.get("rev"):
            try:
                with open(q["rev"]) as f:
                    rev = f.read().strip()
                modified = int(os.path.getmtime(q["rev"]))
            except OSError:
                pass
            seed += "|rev=" + rev
        etag = '"' + hashlib.sha1(seed.encode()).hexdigest()[:16] + '"'
        inm = self.headers.get("If-None-Match")
        ims = self.headers.get("If-Modified-Since")
        since = None
        if ims and not inm:
            try:
                since = email.utils.parsedate_to_datetime(ims).timestamp()
            except (TypeError, ValueError):
                since = None
        if not fault and ((inm and etag in [t.strip() for t in inm.split(",")]) or
                          (since is not None and int(modified) <= since)):
            time.sleep(int(q.get("slow304", "0")) / 1000.0)
            with LOG_LOCK:
                VALIDATED[url.path] = VALIDATED.get(url.path, 0) + 1
                validated = VALIDATED[url.path]
            self.send_response(304)
            self.send_header("X-Validated", str(validated))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", self.date_time_string(modified))
            self.send_header("Cache-Control", q.get("cc", "max-age=3600"))
            self.send_header("X-Origin-Rev", rev or "-")
            self.end_headers()
            return
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and "," not in rng:
            a, _, b = rng[6:].partition("-")
            if a == "":
                start, end = max(0, size - int(b)), size - 1
            else:
                start = int(a)
                end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        length = end - start + 1 if size > 0 else 0
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", self.date_time_string(modified))
        self.send_header("X-Origin-Rev", rev or "-")
        self.send_header("Cache-Control", q.get("cc", "max-age=3600"))
        if fault == "cookie":
            self.send_header("Set-Cookie", "session=1")
        if q.get("vary"):
            self.send_header("Vary", q["vary"])
        if q.get("tags"):
            self.send_header("Surrogate-Key", q["tags"])
        if q.get("xkey"):
            self.send_header("xkey", q["xkey"])
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        chunked = q.get("chunked") == "1" or fault == "chunkcut"
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        if head:
            return
        if content is not None and not chunked and not fault:
            # A plain file body: the kernel copies it (benchmark corpora are large).
            self.wfile.flush()
            self.connection.sendfile(content, offset=start, count=length)
            return
        sent = 0
        step = 65536 if fault == "slow" or pace > 0 else 1 << 20
        cut = fault in ("reset", "truncate", "fin", "rst", "chunkcut", "silence")
        limit = length // 2 if cut else length
        while sent < limit:
            n = min(step, limit - sent)
            if fault == "long" and limit - sent > 100:
                n = min(n, limit - sent - 100)  # the last write: 100 bytes + 100 too many
            if content is None:
                data = pattern(seed, start + sent, n)
            else:
                content.seek(start + sent)
                data = content.read(n)
            if fault == "long" and sent + n == limit:
                data += b"X" * 100  # more than declared, in the same write
            if chunked:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            else:
                self.wfile.write(data)
            sent += n
            if fault == "slow":
                time.sleep(0.05)
            elif pace > 0:
                self.wfile.flush()
                time.sleep(pace)
        if fault == "silence":
            self.wfile.flush()
            time.sleep(3600)
            return
        if fault == "rst":
            self.wfile.flush()
            self.close_connection = True
            # SO_LINGER 0: close() sends a RST instead of a FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if cut:
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if chunked:
            self.wfile.write(b"0\r\n\r\n")


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver listens with a backlog of 5: a burst of connections (a gateway's fills
    # for 40 HTTP/2 streams granted at once) overflowed it, and the dropped SYNs came back
    # a second later (TCP's retransmission), past the tests' origin timeouts.
    request_queue_size = 1024


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--log", required=True)
    ap.add_argument("--files")
    ARGS = ap.parse_args()
    srv = Server((ARGS.host, ARGS.port), Handler)
    if ARGS.port_file:
        tmp = ARGS.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(tmp, ARGS.port_file)
    print(f"test origin on {ARGS.host}:{srv.server_address[1]}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
