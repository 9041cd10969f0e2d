"""Paths a user gives the command line, checked before any work starts.

A compile takes minutes, so a model argument that cannot be a model, or an output that cannot be
written, is refused first, in one line that names the path and what is wrong with it, rather than
as a traceback from ``open`` or ``os.makedirs`` after the work is done.
"""

from __future__ import annotations

import os

from tessera.frontend import check_gguf_file
from tessera.ir import TesseraError


class PathError(TesseraError):
    """A model or output path of the command line that cannot be used."""


def check_chat_source(source: str) -> None:
    """Refuse a model argument of `tessera chat` that cannot be a model: a missing path, a file that is
    no GGUF file (``check_gguf_file``), a folder without an executable.json. A folder whose
    executable.json is there but damaged is left to the loaders, whose errors say what is wrong."""
    if os.path.isdir(source):
        if not os.path.lexists(os.path.join(source, "executable.json")):
            raise PathError(f"{source} is not a compiled model folder (it has no executable.json): give a folder "
                            "`tessera compile` wrote or a .gguf file")
        return
    if not os.path.lexists(source):
        raise PathError(f"{source} does not exist: give a .gguf file or a compiled model folder")
    check_gguf_file(source)


def check_output_folder(output: str, what: str) -> None:
    """Refuse an output folder that could not be made or written: a file in its place, a file where one
    of its parents should be, or a parent that is not writable. Nothing is created here, so a compile
    that fails leaves no empty folder behind. ``what`` names what would be written there."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise PathError(f"{output} is a file, not a folder: give a folder to write {what} into")
    parent = output
    while not os.path.exists(parent):  # the nearest part of the path that exists is the one to check
        parent = os.path.dirname(os.path.abspath(parent))
    if not os.path.isdir(parent):
        raise PathError(f"cannot write {what} into {output}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PathError(f"cannot write {what} into {output}: {parent} is not writable")
