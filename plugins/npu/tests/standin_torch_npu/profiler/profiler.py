"""Stand-in for ``torch_npu.profiler.profiler``.

Like the real module, ``tensorboard_trace_handler`` sets the process-wide output directory that
the next ``profile.start()`` creates its ``<host>_<pid>_<timestamp>_ascend_pt`` directory in, and
``profile.stop()`` hands the profiler to the handler, which parses (here: creates
``ASCEND_PROFILER_OUTPUT``) when ``analyse_flag`` is true.
"""

import json
import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from ..recording import LOG

__all__ = ["analyse", "tensorboard_trace_handler", "profile"]

_OUTPUT = "ASCEND_PROFILER_OUTPUT"
_current_dir: list = [None]
"""The real torch_npu keeps this in a singleton (ProfPathCreator)."""


def tensorboard_trace_handler(
    dir_name: Optional[str] = None,
    worker_name: Optional[str] = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
):
    LOG.record("tensorboard_trace_handler", dir_name=dir_name, worker_name=worker_name, analyse_flag=analyse_flag)
    _current_dir[0] = dir_name

    def handler_fn(prof_inst) -> None:
        if analyse_flag:
            (Path(prof_inst.prof_path) / _OUTPUT).mkdir(exist_ok=True)

    return handler_fn


class profile:
    _count = 0

    def __init__(
        self,
        *,
        activities: Optional[Iterable] = None,
        schedule: Optional[Callable[[int], Any]] = None,
        on_trace_ready: Optional[Callable[..., Any]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config=None,
        execution_trace_observer=None,
        custom_trace_id_callback: Optional[Callable[[], str]] = None,
        use_cuda: Optional[bool] = None,
    ):
        profile._count += 1
        self.index = profile._count
        self.on_trace_ready = on_trace_ready
        self.prof_path = None
        self.arguments = dict(
            activities=list(activities) if activities is not None else None, schedule=schedule,
            record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops,
            with_modules=with_modules, experimental_config=experimental_config,
        )
        LOG.record("profile", index=self.index, **self.arguments)

    def start(self):
        stamp = datetime.now().strftime("%Y%m%d%H%M%S%f")[:-3]
        base = _current_dir[0] or os.getcwd()
        self.prof_path = os.path.join(base, f"{socket.gethostname()}_{os.getpid()}_{stamp}_ascend_pt")
        os.makedirs(self.prof_path)
        Path(self.prof_path, "standin_raw.json").write_text(json.dumps({"profile": self.index}))
        LOG.record("profile.start", index=self.index, prof_path=self.prof_path)

    def stop(self):
        LOG.record("profile.stop", index=self.index, prof_path=self.prof_path)
        if self.on_trace_ready:
            self.on_trace_ready(self)


def analyse(
    profiler_path: str,
    max_process_number: int = 8,
    export_type: Optional[Union[str, list]] = None,
):
    LOG.record("analyse", profiler_path=profiler_path)
    for raw in Path(profiler_path).glob("*_ascend_pt"):
        (raw / _OUTPUT).mkdir(exist_ok=True)
