"""Whether ``nsys profile`` can sample CPUs on this host, and the options to use when it cannot.

Measured with Nsight Systems 2022.4.2 on a virtual machine without a hardware performance-monitoring
unit (``perf_event_open`` of a hardware event fails with ENOENT, as in Firecracker and many cloud
VMs and containers): with its defaults (``--sample=process-tree``, ``--cpuctxsw=process-tree``) nsys
never finishes: the profiled program ends, nsys prints ``Generating '...qdstrm'`` and its agent spins
forever. With ``--sample=none --cpuctxsw=none`` the same run writes its report in about a second.
Ray's nsight plugin first runs ``nsys profile <options> python -c ""`` to validate the options, so on
such a host a profiled worker never even starts.

So when the user chose neither option and this host cannot open a hardware event, rlprof asks for
``sample: none`` and ``cpuctxsw: none`` and says why. The probe is one ``perf_event_open`` system
call on the calling thread (the controller's host: on clusters the worker nodes are usually the same
kind of machine; the user's own ``sample``/``cpuctxsw`` always win).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct

WITHOUT_SAMPLING = {"sample": "none", "cpuctxsw": "none"}

_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319}
_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6


@functools.lru_cache(maxsize=1)
def sampling_problem() -> str | None:
    """Why nsys cannot sample CPUs here (then it hangs, see above), or None when it can or we cannot tell."""
    number = _PERF_EVENT_OPEN.get(platform.machine())
    if number is None or not os.path.exists("/proc/sys/kernel/perf_event_paranoid"):
        return None
    attr = bytearray(_ATTR_SIZE)
    struct.pack_into("IIQ", attr, 0, 0, _ATTR_SIZE, 0)  # PERF_TYPE_HARDWARE, CPU cycles
    struct.pack_into("Q", attr, 40, _DISABLED | _EXCLUDE_KERNEL | _EXCLUDE_HV)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buffer = (ctypes.c_char * _ATTR_SIZE).from_buffer(attr)
        fd = libc.syscall(number, buffer, 0, -1, -1, 0)
    except Exception:  # no libc through ctypes: cannot tell
        return None
    if fd >= 0:
        os.close(fd)
        return None
    code = ctypes.get_errno()
    if code in (errno.ENOENT, errno.ENODEV, errno.EOPNOTSUPP):
        return (f"this host has no hardware performance counters (perf_event_open: {os.strerror(code)}), "
                "where nsys 2022.4's CPU sampling never finishes")
    return None  # EACCES/EPERM: nsys itself falls back to what it may do


def sampling_options(options: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """``options`` plus ``sample=none, cpuctxsw=none`` when neither is set and this host cannot sample;
    and the warning to log (None when nothing was added)."""
    if any(name in options for name in WITHOUT_SAMPLING) or (problem := sampling_problem()) is None:
        return options, None
    return {**options, **WITHOUT_SAMPLING}, (
        f"{problem}: nsys gets sample=none and cpuctxsw=none (set worker_nsight_options.sample / cpuctxsw to choose)"
    )
