"""CPU bridge for verl 0.9.1, loaded through ``VERL_USE_EXTERNAL_MODULES=verl_cpu_bridge``.

verl imports this module from ``verl/__init__.py`` in the driver and in every Ray worker
(after ``verl.utils.device`` and ``verl.plugin.platform``, before any worker module). It bridges
three gaps without editing verl:

1. a ``cpu`` platform in verl's ``PlatformRegistry`` (select it with ``VERL_PLATFORM=cpu``):
   gloo, ``current_device() == "cpu"``, Ray's ``GPU`` resource for bookkeeping only;
2. an ``hf`` rollout: a replica/server pair (``verl_cpu_hf_server``) in
   ``RolloutReplicaRegistry`` and the matching ``ServerAdapter`` in ``_ROLLOUT_REGISTRY``;
3. the process-group backend ``"cpu:gloo,cpu:gloo"`` that verl builds from the platform (torch
   rejects a device named twice) and ``get_device_id()`` results that must name the CPU.

Plus two found with a critic and a reference policy: verl's ``load_valuehead_model`` (the critic's
value model) asks transformers for ``flash_attention_2`` unconditionally (here: ``eager``), and the
forward-only reference engine builds ``CPUOffloadPolicy(pin_memory=True)``, which needs an
accelerator to pin memory for (here: ``pin_memory=False``). And one found with nsys: verl starts
profiled workers under Nsight Systems (Ray's ``nsight`` runtime_env) only on cuda; the cpu platform
gets the same rule.

The rollout registration and the value-model loader live in verl modules that cannot be imported
while ``verl/__init__`` is still running; they are patched by an import hook right after verl
first imports those modules.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import os
import sys
import types

import torch
import torch.distributed

# --------------------------------------------------------------------------------------------
# 1. the cpu platform
# --------------------------------------------------------------------------------------------
from verl.plugin.platform import PlatformBase, PlatformRegistry


def _zero(*_args, **_kwargs):
    return 0


def _none(*_args, **_kwargs):
    return None


class _CpuDeviceModule(types.ModuleType):
    """What ``get_torch_device()`` returns: torch.cpu plus the cuda-style calls verl makes."""

    def __init__(self):
        super().__init__("verl_cpu_bridge.device")

    def __getattr__(self, name):
        if hasattr(torch.cpu, name):
            return getattr(torch.cpu, name)
        # memory statistics and cache controls: there is no device memory to report
        if "memory" in name or name.startswith(("max_", "reset_")):
            return _zero
        raise AttributeError(name)

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def current_device():
        return "cpu"

    set_device = staticmethod(_none)
    synchronize = staticmethod(_none)
    empty_cache = staticmethod(_none)
    ipc_collect = staticmethod(_none)

    @staticmethod
    def manual_seed(seed):
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(*_a, **_k):
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, *_a, **_k):
        torch.set_rng_state(state)

    @staticmethod
    def mem_get_info(*_a, **_k):
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    @staticmethod
    def get_device_name(*_a, **_k):
        return "cpu"

    @staticmethod
    def get_device_properties(*_a, **_k):
        import psutil

        return types.SimpleNamespace(name="cpu", total_memory=psutil.virtual_memory().total)


_DEVICE_MODULE = _CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """Runs verl's workers on the host CPU. Ray's GPU resource only counts worker slots."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check=False) -> bool:
        # never auto-detected: only VERL_PLATFORM=cpu selects it
        return False

    def current_device(self):
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index) -> None:
        return None

    def synchronize(self, device_index=None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0):
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self):
        return None


# --------------------------------------------------------------------------------------------
# 3. process-group backend and device id
# --------------------------------------------------------------------------------------------
_original_init_process_group = torch.distributed.init_process_group


def _normalize_backend(backend):
    """``"cpu:gloo,cpu:gloo"`` -> ``"cpu:gloo"``: one entry per device, first one wins."""
    if not isinstance(backend, str) or "," not in backend:
        return backend
    seen, parts = set(), []
    for part in backend.split(","):
        part = part.strip()
        device = part.split(":", 1)[0] if ":" in part else part
        if device not in seen:
            seen.add(device)
            parts.append(part)
    return ",".join(parts)


def _init_process_group(*args, **kwargs):
    if args:
        args = (_normalize_backend(args[0]),) + tuple(args[1:])
    if "backend" in kwargs:
        kwargs["backend"] = _normalize_backend(kwargs["backend"])
    return _original_init_process_group(*args, **kwargs)


_init_process_group.__wrapped__ = _original_init_process_group
torch.distributed.init_process_group = _init_process_group

import verl.utils.device as _verl_device  # noqa: E402  (already imported by verl/__init__)

_original_get_device_id = _verl_device.get_device_id


def _get_device_id():
    """verl passes this to ``.to()``, ``device_id=`` and ``torch.device()``: a bare int means cuda."""
    device = _original_get_device_id()
    if isinstance(device, int) and os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
        return "cpu"
    return device


_verl_device.get_device_id = _get_device_id


# --------------------------------------------------------------------------------------------
# 2. the hf rollout (and the critic/ref and nsys fixes), applied when verl imports the modules
# --------------------------------------------------------------------------------------------
HF_SERVER_MODULE = "verl_cpu_hf_server"


def _load_hf_replica():
    import importlib

    return importlib.import_module(HF_SERVER_MODULE).HFReplica


def _load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
    """verl's loader with ``attn_implementation="eager"`` instead of a hard-coded flash-attention."""
    from transformers import AutoModelForTokenClassification

    return AutoModelForTokenClassification.from_pretrained(
        pretrained_model_name_or_path=local_path,
        torch_dtype=torch_dtype,
        config=model_config,
        attn_implementation="eager",
        trust_remote_code=trust_remote_code,
    )


def _unpinned_offload_policy(policy_cls):
    """FSDP2's ``CPUOffloadPolicy`` that never pins (pinning needs an accelerator)."""

    class UnpinnedCPUOffloadPolicy(policy_cls):
        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    return UnpinnedCPUOffloadPolicy


def _nsight_on_cpu(create_worker):
    """``RayWorkerGroup._create_worker`` that starts profiled workers under Nsight Systems on the cpu
    platform too. verl attaches Ray's ``nsight`` runtime_env (``global_tool_config.nsys.worker_nsight_options``)
    to every worker of a group with ``profile_steps`` only when ``device_name == "cuda"``; on this
    platform the same rule applies to ``"cpu"``. Nothing else of the worker changes: ``device_name`` is
    read only for that decision here (``RayClassWithInitArgs.__call__`` ignores it)."""

    @functools.wraps(create_worker)
    def _create_worker(self, *args, **kwargs):
        if self.device_name != "cpu" or not self.profile_steps or not self.worker_nsight_options:
            return create_worker(self, *args, **kwargs)
        self.device_name = "cuda"
        try:
            return create_worker(self, *args, **kwargs)
        finally:
            self.device_name = "cpu"

    return _create_worker


def _patch_module(module: types.ModuleType) -> None:
    if module.__name__ == "verl.workers.rollout.base":
        module._ROLLOUT_REGISTRY[("hf", "async")] = f"{HF_SERVER_MODULE}.HFServerAdapter"
    elif module.__name__ == "verl.workers.rollout.replica":
        module.RolloutReplicaRegistry.register("hf", _load_hf_replica)
    elif module.__name__ == "verl.utils.model":
        module.load_valuehead_model = _load_valuehead_model
    elif module.__name__ == "verl.utils.fsdp_utils" and module.CPUOffloadPolicy is not None:
        module.CPUOffloadPolicy = _unpinned_offload_policy(module.CPUOffloadPolicy)
    elif module.__name__ == "verl.single_controller.ray.base":
        module.RayWorkerGroup._create_worker = _nsight_on_cpu(module.RayWorkerGroup._create_worker)


_TARGETS = (
    "verl.workers.rollout.base",
    "verl.workers.rollout.replica",
    "verl.utils.model",
    "verl.utils.fsdp_utils",
    "verl.single_controller.ray.base",
)


class _RolloutRegistryHook(importlib.abc.MetaPathFinder):
    """Runs ``_patch_module`` right after verl executes one of ``_TARGETS``."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _TARGETS:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                exec_module(module)
                _patch_module(module)

        spec.loader = _Loader()
        return spec


for _name in _TARGETS:
    if _name in sys.modules:
        _patch_module(sys.modules[_name])
if not all(name in sys.modules for name in _TARGETS):
    sys.meta_path.insert(0, _RolloutRegistryHook())
