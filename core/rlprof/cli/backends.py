"""``rlprof backends [--json]``: the installed profiling backends, their package, version, hook contract and hooks.

What is installed comes from entry-point metadata (:mod:`rlprof.installed`); each backend is imported
through the one plugin loader (:func:`rlprof.runtime.registry.backend_info`) to say whether it loads.
"""

from __future__ import annotations

import argparse
import json

from rlprof.errors import EXIT_OK


def main(args: list[str]) -> int:
    """``rlprof backends``: what is installed, from where, which hooks, does it import."""
    parser = argparse.ArgumentParser(prog="rlprof backends", description="List the installed profiling backends.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    opts = parser.parse_args(args)
    from rlprof.installed import discover
    from rlprof.runtime.registry import backend_info

    infos = [backend_info(name, ep) for name, ep in sorted(discover().items())]
    if opts.json:
        print(json.dumps(infos, indent=2))
        return EXIT_OK
    if not infos:
        print("no backends installed (pip install rlprof-torch, rlprof-nsys or rlprof-npu, or your own)")
        return EXIT_OK
    name_w = max(len(i["name"]) for i in infos) + 2
    dist_w = max(len(f"{i['distribution']} {i['version']}") for i in infos) + 2
    pad = " " * name_w
    for info in infos:
        status = "ok" if info["imports"] else ("REFUSED" if info.get("refused") else "IMPORT FAILED")
        print(f"{info['name']:<{name_w}}{info['distribution'] + ' ' + info['version']:<{dist_w}}{status}")
        print(f"{pad}entry point: {info['entry_point']}")
        if info["imports"]:
            declared = "" if info["contract_declared"] else " (assumed: the backend declares none)"
            print(f"{pad}contract: {info['contract']}{declared}")
            print(f"{pad}hooks: {', '.join(info['hooks'])}")
        else:
            print(f"{pad}error: {info['error']}")
        for problem in info.get("problems", []):
            print(f"{pad}warning: {problem}")
    return EXIT_OK
