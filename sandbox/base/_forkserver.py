"""Imported first by the sweep's forkserver (before :mod:`sandbox.sweep._preload`, whose package
imports torch and pandas: 8-12 s on a loaded machine): it binds the server to the command that
started it at once (:func:`sandbox.base.processes._forkserver_setup`), so that a command killed while the
server is still importing takes the server with it, and no worker is forked for a command that is
gone (its requests wait on the server's socket until the preload ends). Only the standard library
and :mod:`sandbox.base.processes` are imported here."""

import sys


def _forkserver_main():
    """The frame of ``multiprocessing.forkserver.main`` importing this module (None elsewhere)."""
    f = sys._getframe()
    while f is not None:
        if f.f_globals.get("__name__") == "multiprocessing.forkserver" and f.f_code.co_name == "main":
            return f
        f = f.f_back
    return None


if _forkserver_main() is not None:
    from sandbox.base.processes import _forkserver_setup

    _forkserver_setup()
