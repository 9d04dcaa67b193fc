"""Builds the optional C++ extension ``rlprof_torch._nogil`` (everything else is in pyproject.toml).

``optional=True``: without a C++ compiler, or on a platform without ``dlfcn.h``, the build says
so and goes on, and the ``torch`` backend ends its captures through torch's own calls, with the GIL
held (rlprof_torch/nogil.py says that once per process). No torch headers are needed: the module
finds torch's functions in the process at run time (docs/torch-nogil.md).
"""

import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):  # libstdc++'s symbol names are the ones looked up
    ext_modules.append(Extension(
        "rlprof_torch._nogil",
        sources=["rlprof_torch/_nogil.cpp"],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        libraries=["dl"],
        optional=True,
    ))

setup(ext_modules=ext_modules)
