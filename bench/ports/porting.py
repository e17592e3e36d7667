# SPDX-License-Identifier: BSD-3-Clause
"""What every port script under bench/ports shares: the anchored source
editor (an edit whose anchor is not found exactly as often as expected
stops the port and names it, writing nothing), the check that no MPI call
of the exchange was left unported, and the refusal to write a program
that is not ours inside the ovl tree."""

import os

OVL_ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


class PortError(Exception):
    pass


class Source:
    """A source file being edited; every edit asserts its anchor's count."""

    def __init__(self, path):
        self.path = path
        with open(path, encoding="ascii") as f:
            self.text = f.read()

    def replace(self, old, new, count=1, what=""):
        n = self.text.count(old)
        if n != count:
            raise PortError(
                "%s: anchor %sfound %d times, expected %d:\n---\n%s\n---"
                % (self.path, "(" + what + ") " if what else "", n, count, old)
            )
        self.text = self.text.replace(old, new)

    def insert_after(self, anchor, new, what=""):
        self.replace(anchor, anchor + new, 1, what)

    def insert_before(self, anchor, new, what=""):
        self.replace(anchor, new + anchor, 1, what)

    def write(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="ascii") as f:
            f.write(self.text)


def check_calls_left(src, calls):
    """Every point-to-point call of the exchange must have been ported."""
    for call in calls:
        if call in src.text:
            raise PortError("%s: %s left after porting" % (src.path, call))


def out_dir_refused(out, program):
    """A message if @out lies inside the ovl tree (the program's code must
    stay outside it), else None."""
    path, root = os.path.realpath(out), os.path.realpath(OVL_ROOT)
    if os.path.exists(os.path.join(OVL_ROOT, "include", "ovl.h")) and (
            path == root or path.startswith(root + os.sep)):
        return ("port.py: OUT_DIR %s is inside the ovl tree %s: %s's code must stay "
                "outside it\n" % (out, OVL_ROOT, program))
    return None
