#!/usr/bin/env python3
"""A deliberately broken adapter for the adapter protocol's own tests
(tests/integration/protocol.rs). Standard library only (Python 3.11).

An in-memory queue (enqueue, lease, complete, read, clear: the required
operations, no server) that misbehaves on one operation, chosen by argv:

    broken.py MODE OP [--pidfile PATH]

    ok       never misbehaves (OP is ignored)
    slow     answers OP 1.5 s late (past the test's request timeout)
    garbage  prints a line that is not JSON instead of answering OP
    exit     exits (status 3) instead of answering OP
    reorder  holds the first OP request until a second one arrives, then
             answers the second first
    unasked  answers OP with an id that was never asked
    refuse   answers hello without `complete` among its operations

--pidfile PATH: writes this process's pid there at start, so that a test
can check that the process is gone.
--log PATH: appends each request's op and worker there, one a line.
--crash: lists the optional `crash` among its operations and answers it
null (a worker's crash: this in-memory queue keeps nothing per worker).
"""

import json
import sys
import threading
import time

args = sys.argv[1:]
pidfile = None
if "--pidfile" in args:
    i = args.index("--pidfile")
    pidfile = args[i + 1]
    del args[i : i + 2]
logfile = None
if "--log" in args:
    i = args.index("--log")
    logfile = args[i + 1]
    del args[i : i + 2]
crash = "--crash" in args
if crash:
    args.remove("--crash")
MODE = args[0] if args else "ok"
OP = args[1] if len(args) > 1 else ""

if pidfile:
    with open(pidfile, "w") as f:
        f.write(str(__import__("os").getpid()))

out_lock = threading.Lock()


def send(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def raw(text):
    with out_lock:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


# The queue: job -> state, payload, token; pending in admission order.
jobs = {}
pending = []


def now_of(req):
    n = req.get("now_ms")
    return n if n is not None else int(time.time() * 1000)


def handle(req):
    op = req["op"]
    if op == "enqueue":
        if req["job"] in jobs:
            return "duplicate"
        jobs[req["job"]] = {"state": "pending", "payload": req["payload"], "token": 0}
        pending.append(req["job"])
        return "enqueued"
    if op == "lease":
        if not pending:
            return None
        job = pending.pop(0)
        row = jobs[job]
        row["state"] = "active"
        row["token"] += 1
        deadline = now_of(req) + req["lease_ms"]
        return {"job": job, "token": row["token"], "deadline_ms": deadline, "payload": row["payload"]}
    if op == "complete":
        row = jobs.get(req["job"])
        if row is None:
            return {"outcome": "missing"}
        if row["state"] == "done":
            return {"outcome": "already_settled"}
        row["state"] = "done"
        return {"outcome": "settled"}
    if op == "read":
        return {"jobs": {j: r["state"] for j, r in jobs.items()}, "problems": []}
    if op == "clear":
        jobs.clear()
        pending.clear()
        return None
    if op == "crash" and crash:
        return None
    raise KeyError(op)


def answer(req):
    try:
        return {"in_reply_to": req["id"], "ok": handle(req)}
    except KeyError as e:
        return {"in_reply_to": req["id"], "error": {"kind": "unsupported", "message": str(e)}}


held = None
for line in sys.stdin:
    req = json.loads(line)
    if logfile:
        with open(logfile, "a") as f:
            f.write("%s %s\n" % (req["op"], req.get("worker", "-")))
    if req["op"] == "hello":
        ops = ["enqueue", "lease", "complete", "read", "clear"]
        if MODE == "refuse":
            ops.remove("complete")
        if crash:
            ops.append("crash")
        caps = {"operations": ops, "logical_time": True, "fences": False}
        send({"in_reply_to": req["id"], "ok": {"name": "broken-" + MODE, "capabilities": caps}})
        continue
    if req["op"] != OP or MODE == "ok":
        send(answer(req))
        continue
    if MODE == "slow":
        late = answer(req)
        threading.Timer(1.5, send, args=(late,)).start()
    elif MODE == "garbage":
        raw("this is not JSON <%d>" % req["id"])
    elif MODE == "exit":
        sys.exit(3)
    elif MODE == "reorder":
        if held is None:
            held = req
        else:
            send(answer(req))
            send(answer(held))
            held = None
    elif MODE == "unasked":
        send({"in_reply_to": req["id"] + 1000, "ok": None})
    else:
        send(answer(req))
