#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Check an OVL_TRACE file: valid JSON in the Chrome trace-event format,
well-formed events, and the event names given on the command line present.

  check_trace.py FILE RANK NAME... [--page-access PATTERN[,PATTERN...]]
"""
import json
import sys


def fail(msg):
    print("FAIL check_trace: " + msg)
    sys.exit(1)


def main():
    args = sys.argv[1:]
    pattern = None
    if "--page-access" in args:
        i = args.index("--page-access")
        pattern = args[i + 1]
        del args[i:i + 2]
    path, rank, names = args[0], int(args[1]), args[2:]
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (path, e))
    evs = doc.get("traceEvents")
    if not isinstance(evs, list) or not evs:
        fail("%s: no traceEvents list" % path)
    seen = {}
    for e in evs:
        ph = e.get("ph")
        if ph not in ("X", "i", "M"):
            fail("%s: event with ph %r" % (path, ph))
        if e.get("pid") != rank or not isinstance(e.get("tid"), int):
            fail("%s: bad pid/tid in %r" % (path, e))
        if ph != "M":
            if not isinstance(e.get("ts"), (int, float)) or not e.get("cat"):
                fail("%s: bad ts/cat in %r" % (path, e))
            if ph == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
                fail("%s: bad dur in %r" % (path, e))
        seen.setdefault(e["name"], []).append(e)
    for n in names:
        if n not in seen:
            fail("%s: no %r event (have %s)" % (path, n, sorted(seen)))
    if pattern:
        pa = [e for e in seen.get("page-access", []) if e["args"]["touched"] >= 2]
        if not pa:
            fail("%s: no page-access trace with 2 or more pages" % path)
        for e in pa:
            a = e["args"]
            if a["touched"] != len(a["order"]) or len(set(a["order"])) != len(a["order"]):
                fail("%s: inconsistent page-access %r" % (path, a))
            if any(p < 0 or p >= a["pages"] for p in a["order"]):
                fail("%s: page out of range in %r" % (path, a))
        for want in pattern.split(","):
            if not any(e["args"]["pattern"] == want for e in pa):
                fail("%s: no page-access with pattern %s: %r" % (path, want,
                                                                  [e["args"] for e in pa]))
    if doc.get("otherData", {}).get("dropped", 0):
        fail("%s: events dropped" % path)
    print("check_trace: %s: %d events, %d names ok" % (path, len(evs), len(names)))


main()
