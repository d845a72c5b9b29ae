#!/usr/bin/env python3
"""Start time of a Nomad session container with the session runtime bundle's sshd against the image's own.

For each round, alternately: a 1-container session of the rendered job's entrypoint in an image of static
busybox alone (sshd, ssh, scp from the runtime bundle, bind-mounted read-only as the host volume would be),
in an image of nothing but its command (no shell, no libc: everything from the bundle), and in a busybox image
that has OpenSSH (the image's sshd is used; the bundle is mounted too, and its shell runs the entrypoint). The time is
from starting the container (its rootfs already made) until its sshd accepts a TCP connection on the ssh port (the same harness as
tests/unit/plugins/module_utils/_nomad/test_nomad_entrypoint.py: namespaces, chroot, the job's entrypoint). Prints the medians and the ratios
bundle/own. Needs root, OpenSSH and busybox-static; it holds the test suite's machine lock while it runs
(tests/support/machine_lock.py), so it never runs beside a test run's namespace tests.

    python3 benchmarks/runtime_bundle.py --repeat 5
"""
from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "collections"), os.path.join(REPO, "tests", "support")]

from machine_lock import machine_lock  # noqa: E402  (the test suite's lock for what changes this machine)
from test_nomad_entrypoint import BUNDLER, Namespaces, Session, _command, sh  # noqa: E402  (the entrypoint test's harness)
from ansible_collections.backendai.cluster.plugins.module_utils._nomad.job import RUNTIME_VERSION  # noqa: E402


def one(kind: str, bundle: str) -> float:
    spec = {"name": "bench-rt", "image": "unused", "cluster_size": 1, "command": _command(kind, 60)}
    made = Namespaces()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            session = Session(made, pathlib.Path(tmp), kind, spec, bundle)  # returns once sshd accepts
            return time.monotonic() - session.started  # from the container's start (its rootfs made before)
        finally:
            made.teardown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as dest:
        sh("/usr/bin/python3", "-IS", BUNDLER, RUNTIME_VERSION, dest)
        bundle = os.path.realpath(os.path.join(dest, RUNTIME_VERSION))
        times: dict = {"bare": [], "distroless": [], "busybox": []}
        for _ in range(args.repeat):
            for kind in times:
                times[kind].append(one(kind, bundle))
    own, via, bare = (statistics.median(times[k]) for k in ("busybox", "bare", "distroless"))
    print("container start until sshd answers (median of %d): image's own sshd %.3f s, bundle's sshd %.3f s "
          "(ratio bundle/own %.2f), bundle's everything in an image of only its command %.3f s (ratio %.2f)"
          % (args.repeat, own, via, via / own, bare, bare / own))
    return 0


if __name__ == "__main__":
    with machine_lock():  # sessions and namespaces: never beside a test run's leak checks
        sys.exit(main())
