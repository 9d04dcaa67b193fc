"""Importing torch_npu lazily, and saying plainly why it failed.

torch_npu is not a dependency of rlprof-npu: it only imports where the Ascend CANN toolkit is
installed (its extension links ``libhccl.so`` and friends). The backend must still load, validate
configuration and let training run everywhere else, so the import happens on first need, at most
once per backend instance, and a failure becomes a problem string for ``check_environment``
(printed by ``rlprof check`` and logged once by the Profiler) instead of an exception.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

MODULE = "torch_npu"


class TorchNpuImport:
    """The outcome of importing torch_npu once: the module, or the reason it is unusable."""

    def __init__(self) -> None:
        self._tried = False
        self._module: ModuleType | None = None
        self._problem: str | None = None

    def module(self) -> ModuleType | None:
        """torch_npu, or None when it cannot be imported here (see :meth:`problem`)."""
        if not self._tried:
            self._tried = True
            try:
                self._module = importlib.import_module(MODULE)
            except Exception as exc:  # ImportError, or torch_npu's own init failing without a device
                self._problem = describe_import_failure(exc)
        return self._module

    def problem(self) -> str | None:
        """Why torch_npu is unusable, or None when it imported."""
        self.module()
        return self._problem


def describe_import_failure(exc: BaseException) -> str:
    """One sentence: the import error as raised, what it usually means, and that the run goes on."""
    error = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name == MODULE:
        fix = f"install torch-npu matching torch ({_torch_npu_requirement()}) and the Ascend CANN toolkit"
    else:
        fix = ("torch_npu is installed but could not load; usually the Ascend CANN toolkit is missing or its "
               "environment is not set (source <CANN>/set_env.sh so libhccl.so and friends are found)")
    return (f"torch_npu cannot be imported ({error}): {fix}. "
            "Training runs as usual, without NPU capture.")


def _torch_npu_requirement() -> str:
    try:
        torch_version = metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return "pip install torch torch-npu with the same version"
    return f"pip install torch-npu=={torch_version}"
