#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Check OVL_TRACE files: valid JSON in the Chrome trace-event format,
well-formed events, and the event names asked for present.

  check_trace.py SPEC...
  SPEC = FILE:RANK:NAME[,NAME...][:PATTERN[,PATTERN...]]

NAME: an event name that must appear; NAME/ARG: an event of that name
whose args hold ARG (e.g. wait/bytes: a wait in ovl_get_need).
PATTERN: a page-access verdict that must appear (sequential-up, ...) among
the traces of 2 or more pages; bytes=N: a page-access trace of a watched
transfer of N bytes (of any length).
One process checks every rank's file (python starts slowly on a busy
machine).
"""
import json
import sys


def fail(msg):
    print("FAIL check_trace: " + msg)
    sys.exit(1)


def check(path, rank, names, pattern):
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
        name, _, arg = n.partition("/")
        if name not in seen:
            fail("%s: no %r event (have %s)" % (path, name, sorted(seen)))
        if arg and not any(arg in e.get("args", {}) for e in seen[name]):
            fail("%s: no %r event with argument %r" % (path, name, arg))
    for e in seen.get("page-access", []):
        a = e["args"]
        if a["touched"] != len(a["order"]) or len(set(a["order"])) != len(a["order"]):
            fail("%s: inconsistent page-access %r" % (path, a))
        if any(p < 0 or p >= a["pages"] for p in a["order"]):
            fail("%s: page out of range in %r" % (path, a))
    wants = pattern.split(",") if pattern else []
    for want in [w for w in wants if w.startswith("bytes=")]:
        n = int(want[len("bytes="):])
        if not any(e["args"]["bytes"] == n for e in seen.get("page-access", [])):
            fail("%s: no page-access trace of a %d-byte transfer: %r" %
                 (path, n, [e["args"] for e in seen.get("page-access", [])]))
    verdicts = [w for w in wants if not w.startswith("bytes=")]
    if verdicts:
        pa = [e for e in seen.get("page-access", []) if e["args"]["touched"] >= 2]
        if not pa:
            fail("%s: no page-access trace with 2 or more pages" % path)
        for want in verdicts:
            if not any(e["args"]["pattern"] == want for e in pa):
                fail("%s: no page-access with pattern %s: %r" % (path, want,
                                                                  [e["args"] for e in pa]))
    if doc.get("otherData", {}).get("dropped", 0):
        fail("%s: events dropped" % path)
    print("check_trace: %s: %d events, %d names ok" % (path, len(evs), len(names)))


def main():
    if len(sys.argv) < 2:
        fail("usage: check_trace.py FILE:RANK:NAMES[:PATTERNS]...")
    for spec in sys.argv[1:]:
        parts = spec.rsplit(":", 3) if spec.count(":") >= 3 else spec.rsplit(":", 2)
        if len(parts) == 3:
            parts.append("")
        path, rank, names, pattern = parts
        check(path, int(rank), [n for n in names.split(",") if n], pattern or None)


main()
