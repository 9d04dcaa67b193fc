"""``rlprof npu-analyse PATH``: the offline parse of captures collected with ``analysis: false``.

Parsing inside training (``analysis: true``) stalls the process at every capture end, which in a
per-region capture mode means at every region; the guide's alternative is to collect raw data and
later call ``torch_npu.profiler.profiler.analyse(profiler_path=<parent of the *_ascend_pt
directory>)``. This command does that for every capture of a run, found through the manifest
(records of ``kind: ascend_pt``), so nobody has to walk the layout by hand.

It needs torch_npu and CANN where it runs, but no NPU device. Exit status: 0 all parsed (or
nothing to parse), 1 torch_npu missing or a capture left unparsed, 2 PATH holds no rlprof run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from rlprof.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from rlprof.backend_api import manifest_files, read_records

from .capture import ARTIFACT_KIND
from .torch_npu_import import TorchNpuImport

PARSED_OUTPUT = "ASCEND_PROFILER_OUTPUT"
"""The directory torch_npu's parse writes inside each ``*_ascend_pt`` directory."""


def captures_to_parse(path: Path, include_parsed: bool = False) -> list[Path]:
    """The ``*_ascend_pt`` directories the manifests under ``path`` list, collected with
    ``analysis: false`` unless ``include_parsed``; absolute, sorted, existing ones only."""
    found: set[Path] = set()
    for record in read_records([path]):
        if record.get("type") != "artifact" or record.get("kind") != ARTIFACT_KIND:
            continue
        if record.get("analysis") and not include_parsed:
            continue
        directory = Path(record["_run_dir"]) / record["path"]
        if directory.is_dir():
            found.add(directory.resolve())
    return sorted(found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rlprof npu-analyse",
        description="Parse NPU captures collected with analysis: false (torch_npu.profiler.profiler.analyse).",
    )
    parser.add_argument("path", help="a save_path, a run directory or a manifest file")
    parser.add_argument("--all", action="store_true", help="also parse captures already parsed during the run")
    parser.add_argument("--list", action="store_true", help="only list the captures that would be parsed")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))

    path = Path(opts.path)
    if not manifest_files([path]):
        print(f"rlprof npu-analyse: {str(path)!r} holds no rlprof run (no manifest/*.jsonl under it)", file=sys.stderr)
        return EXIT_INVALID
    captures = captures_to_parse(path, include_parsed=opts.all)
    if not captures:
        print(f"no NPU captures to parse under {path} (none collected with analysis: false; --all parses every one)")
        return EXIT_OK
    if opts.list:
        print("\n".join(str(c) for c in captures))
        return EXIT_OK

    importer = TorchNpuImport()
    torch_npu = importer.module()
    if torch_npu is None:
        print(f"rlprof npu-analyse: {importer.problem()}\n"
              f"Run this command where torch_npu and CANN are installed; {len(captures)} capture(s) wait to be parsed.",
              file=sys.stderr)
        return EXIT_FAILED
    for parent in sorted({c.parent for c in captures}):
        print(f"parsing {parent}", flush=True)
        torch_npu.profiler.profiler.analyse(profiler_path=str(parent))
    unparsed = [c for c in captures if not (c / PARSED_OUTPUT).is_dir()]
    for capture in unparsed:
        print(f"rlprof npu-analyse: no {PARSED_OUTPUT} in {capture} after parsing; see torch_npu's messages above", file=sys.stderr)
    print(f"parsed {len(captures) - len(unparsed)} of {len(captures)} capture(s)")
    return EXIT_FAILED if unparsed else EXIT_OK
