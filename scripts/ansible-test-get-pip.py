# backendai-cluster: offline get-pip.py stand-in for ansible-test
"""Offline stand-in for ``get-pip.py``, used by ansible-test to bootstrap pip.

ansible-test creates its virtualenvs without pip and then runs
``get-pip-<version>.py`` (downloaded from ci-files.testing.ansible.com) in them.
It first looks for ``~/.ansible/test/cache/get_pip_<version>.py``; when that
file exists nothing is downloaded. ``scripts/ansible-test-sanity`` copies this
file there (together with the pip wheel it downloads from PyPI).

Like the real get-pip.py, it runs pip from a wheel on ``sys.path`` and calls
``pip install --upgrade --force-reinstall <args> [pip] [setuptools] [wheel]``,
honouring ``--no-setuptools`` / ``--no-wheel``. The pip wheel comes from, in
order: this file's directory, the interpreter's ``ensurepip`` bundle, and
Debian's ``/usr/share/python-wheels``. Packages themselves come from PyPI (or a
configured index) as usual; the local wheel directory is added with
``--find-links`` so pip's own wheel needs no download.
"""

from __future__ import annotations

import glob
import os
import re
import sys


def _version_key(path):
    match = re.match(r'pip-([0-9.]+)-', os.path.basename(path))
    return tuple(int(part) for part in match.group(1).split('.') if part) if match else ()


def find_pip_wheels():
    """Return candidate pip wheels (directory, sorted newest first)."""
    directories = [os.path.dirname(os.path.abspath(__file__))]

    try:
        import ensurepip  # pylint: disable=import-outside-toplevel
    except ImportError:
        pass
    else:
        directories.append(os.path.join(os.path.dirname(ensurepip.__file__), '_bundled'))

    directories.append('/usr/share/python-wheels')

    for directory in directories:
        wheels = sorted(glob.glob(os.path.join(directory, 'pip-*.whl')), key=_version_key, reverse=True)

        if wheels:
            return directory, wheels

    return None, []


def main():
    args = sys.argv[1:]
    packages = []

    for name in ('setuptools', 'wheel'):
        flag = '--no-' + name

        if flag in args:
            args.remove(flag)
            continue

        if os.environ.get('PIP_NO_' + name.upper()):
            continue

        try:
            __import__(name)
        except ImportError:
            packages.append(name)

    if not any(re.match(r'^pip\b', arg, re.IGNORECASE) for arg in args):
        packages.insert(0, 'pip')

    directory, wheels = find_pip_wheels()

    if not wheels:
        sys.stderr.write('ansible-test-get-pip: no pip wheel found (looked next to %s, in ensurepip '
                         'and /usr/share/python-wheels)\n' % os.path.abspath(__file__))
        sys.exit(1)

    sys.path.insert(0, wheels[0])

    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel

    command = ['install', '--upgrade', '--force-reinstall', '--find-links', directory] + args + packages
    sys.exit(pip_main(command))


if __name__ == '__main__':
    main()
