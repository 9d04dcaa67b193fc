"""NVTX's application side, in ctypes: attach to the NVTX tool of this process and call it directly.

Why not the ``nvtx`` PyPI package: checked against Debian's Nsight Systems 2022.4.2 (the one CUDA
11.8 bundles), ranges from ``nvtx`` 0.2.12 and later are never recorded. Those versions create a
domain only when ``nvtxDomainIsEnabled`` (an NVTX *payload extension* query, newer than that nsys)
says yes; an older tool does not answer it, so ``nvtx.get_domain`` hands out a do-nothing
``DummyDomain`` and the report holds the ``rlprof`` domain's create/destroy events and nothing else.
The plain NVTX v3 calls themselves (named domains, ASCII or registered messages, categories,
payloads) are recorded by that nsys and by every later one. So rlprof makes exactly those calls,
through NVTX's documented tool interface, with no NVTX build of its own:

1. ``$NVTX_INJECTION64_PATH`` names the tool (nsys sets it to its ``libToolsInjection64.so``; our
   tests to their recorder library). Unset: no tool, every call below is skipped.
2. The tool's ``InitializeInjectionNvtx2`` is called with a ``GetExportTable`` function; through its
   ``CALLBACKS`` table the tool asks for each module's function table and writes its
   implementations into the slots (``VERSIONINFO`` tells it we speak NVTX API version 3).
3. Ranges and marks call the ``CORE2`` slots (``nvtxDomainRangeStartEx`` ...) with a version-3
   attribute struct holding a plain ASCII message: no registered strings, no extension payloads.

This is what every C program built with NVTX v3's header-only library does at its first NVTX call,
so several clients in one process (torch, other libraries, this one) attach side by side.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from typing import Any

log = logging.getLogger("rlprof")

INJECTION_ENV = "NVTX_INJECTION64_PATH"
API_VERSION = 3

# Export table ids, callback modules and the CORE2 callback ids of nvtxDetail/nvtxTypes.h.
_ETID_CALLBACKS = 1
_ETID_VERSIONINFO = 3
_MODULE_SLOTS = {1: 16, 2: 9, 3: 15, 4: 7, 5: 16, 6: 7}
"""Callback module → number of callback ids (index 0 is "invalid"): CORE, CUDA, OPENCL, CUDART, CORE2, SYNC."""
_CORE2 = 5
_DOMAIN_MARK_EX = 1
_DOMAIN_RANGE_START_EX = 2
_DOMAIN_RANGE_END = 3
_DOMAIN_NAME_CATEGORY_A = 8
_DOMAIN_REGISTER_STRING_A = 10
_DOMAIN_CREATE_A = 12

_COLOR_ARGB = 1
_MESSAGE_ASCII = 1
_MESSAGE_REGISTERED = 3
_PAYLOAD_INT64 = 2


class _Payload(ctypes.Union):
    _fields_ = [("ullValue", ctypes.c_uint64), ("llValue", ctypes.c_int64), ("dValue", ctypes.c_double)]


class _Message(ctypes.Union):
    _fields_ = [("ascii", ctypes.c_char_p), ("unicode", ctypes.c_wchar_p), ("registered", ctypes.c_void_p)]


class EventAttributes(ctypes.Structure):
    """``nvtxEventAttributes_t`` version 3 (48 bytes on 64-bit)."""

    _fields_ = [
        ("version", ctypes.c_uint16), ("size", ctypes.c_uint16), ("category", ctypes.c_uint32),
        ("colorType", ctypes.c_int32), ("color", ctypes.c_uint32), ("payloadType", ctypes.c_int32),
        ("reserved0", ctypes.c_int32), ("payload", _Payload), ("messageType", ctypes.c_int32),
        ("message", _Message),
    ]


class _CallbacksTable(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("GetModuleFunctionTable", ctypes.c_void_p)]


class _VersionInfoTable(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_uint32), ("reserved0", ctypes.c_uint32),
                ("SetInjectionNvtxVersion", ctypes.c_void_p)]


_GetExportTable = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
_GetModuleFunctionTable = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                                           ctypes.POINTER(ctypes.c_uint))
_SetInjectionNvtxVersion = ctypes.CFUNCTYPE(None, ctypes.c_uint32)
_InitializeInjection = ctypes.CFUNCTYPE(ctypes.c_int, _GetExportTable)

_DomainCreateA = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)
_DomainNameCategoryA = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p)
_DomainRegisterStringA = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
_DomainRangeStartEx = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.POINTER(EventAttributes))
_DomainRangeEnd = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64)
_DomainMarkEx = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(EventAttributes))


def ascii_text(text: str) -> bytes:
    """``text`` as the NUL-free ASCII an NVTX message must be (other characters become ``?``)."""
    return text.replace("\0", "?").encode("ascii", "replace")


class Tool:
    """The NVTX tool attached to this process, or a do-nothing stand-in when there is none.

    One per process (:func:`tool`): the tool keeps pointers into the tables built here.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.problem: str | None = None
        """Why no tool is attached (None when one is, or when none was asked for)."""
        self._keep: list[Any] = []  # ctypes objects the tool holds pointers to: alive as long as the process
        self._create = self._category = self._register = self._start = self._end = self._mark = None
        if path:
            try:
                self._attach(path)
            except Exception as exc:  # a broken tool must cost the training nothing but its ranges
                self.problem = f"could not attach to the NVTX tool {path}: {type(exc).__name__}: {exc}"
                self._create = self._category = self._register = self._start = self._end = self._mark = None

    @property
    def attached(self) -> bool:
        """Whether ranges reach a tool (the tool installed at least range start and end)."""
        return self._start is not None and self._end is not None

    def _attach(self, path: str) -> None:
        library = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        initialize = _InitializeInjection(("InitializeInjectionNvtx2", library))
        tables = {module: (ctypes.c_void_p * size)() for module, size in _MODULE_SLOTS.items()}
        # The tool gets, per module, an array of pointers to the slots it may fill (index 0 and the
        # terminating entry stay NULL, as in NVTX's own tables).
        pointer_tables = {}
        for module, slots in tables.items():
            pointers = (ctypes.c_void_p * (len(slots) + 1))()
            for index in range(1, len(slots)):
                pointers[index] = ctypes.addressof(slots) + index * ctypes.sizeof(ctypes.c_void_p)
            pointer_tables[module] = pointers

        def get_module_function_table(module, out_table, out_size):
            pointers = pointer_tables.get(module)
            if pointers is None:
                return 0
            if out_size:
                out_size[0] = len(tables[module])
            if out_table:
                out_table[0] = ctypes.addressof(pointers)
            return 1

        get_module = _GetModuleFunctionTable(get_module_function_table)
        set_version = _SetInjectionNvtxVersion(lambda version: None)
        callbacks = _CallbacksTable(ctypes.sizeof(_CallbacksTable), ctypes.cast(get_module, ctypes.c_void_p))
        version = _VersionInfoTable(ctypes.sizeof(_VersionInfoTable), API_VERSION, 0,
                                    ctypes.cast(set_version, ctypes.c_void_p))
        exports = {_ETID_CALLBACKS: ctypes.addressof(callbacks), _ETID_VERSIONINFO: ctypes.addressof(version)}
        get_export_table = _GetExportTable(lambda table_id: exports.get(table_id, 0))
        self._keep += [library, tables, pointer_tables, get_module, set_version, callbacks, version, get_export_table]
        if not initialize(get_export_table):
            self.problem = f"the NVTX tool {path} declined to initialise (InitializeInjectionNvtx2 returned 0)"
            return
        core2 = tables[_CORE2]

        def slot(index, prototype):
            return prototype(core2[index]) if core2[index] else None

        self._create = slot(_DOMAIN_CREATE_A, _DomainCreateA)
        self._category = slot(_DOMAIN_NAME_CATEGORY_A, _DomainNameCategoryA)
        self._start = slot(_DOMAIN_RANGE_START_EX, _DomainRangeStartEx)
        self._end = slot(_DOMAIN_RANGE_END, _DomainRangeEnd)
        self._mark = slot(_DOMAIN_MARK_EX, _DomainMarkEx)
        self._register = slot(_DOMAIN_REGISTER_STRING_A, _DomainRegisterStringA)
        if not self.attached:
            self.problem = f"the NVTX tool {path} does not record domain ranges"

    # ----------------------------------------------------------------- the calls rlprof makes

    def domain(self, name: str) -> int | None:
        """``nvtxDomainCreateA(name)``: a domain handle (None without a tool: the default domain)."""
        return self._create(ascii_text(name)) if self._create else None

    def name_category(self, domain: int | None, category: int, name: str) -> None:
        """``nvtxDomainNameCategoryA``: ``category`` is shown as ``name``."""
        if self._category:
            self._category(domain, category, ascii_text(name))

    def register(self, domain: int | None, text: str) -> int | None:
        """``nvtxDomainRegisterStringA``: a handle for :meth:`range_start`'s ``registered`` (None when the
        tool does not register strings). ``nsys --nvtx-capture`` matches only registered messages
        unless ``NSYS_NVTX_PROFILER_REGISTER_ONLY=0``, so capture-window ranges use one."""
        return self._register(domain, ascii_text(text)) or None if self._register else None

    def range_start(self, domain: int | None, message: bytes, color: int, category: int = 0,
                    registered: int | None = None) -> int:
        """``nvtxDomainRangeStartEx`` with an ASCII message (or the ``registered`` string handle instead);
        the id for :meth:`range_end` (0 without a tool)."""
        if self._start is None:
            return 0
        attributes = _attributes(message, color, category, None)
        if registered:
            attributes.messageType = _MESSAGE_REGISTERED
            attributes.message.registered = registered
        return self._start(domain, ctypes.byref(attributes))

    def range_end(self, domain: int | None, range_id: int) -> None:
        """``nvtxDomainRangeEnd``: ends a range started by :meth:`range_start`, from any thread."""
        if self._end is not None and range_id:
            self._end(domain, range_id)

    def mark(self, domain: int | None, message: bytes, color: int, payload: int | None = None) -> None:
        """``nvtxDomainMarkEx``: an instant event with an ASCII message and an optional int64 payload."""
        if self._mark is not None:
            self._mark(domain, ctypes.byref(_attributes(message, color, 0, payload)))


def _attributes(message: bytes, color: int, category: int, payload: int | None) -> EventAttributes:
    attributes = EventAttributes()
    attributes.version = API_VERSION
    attributes.size = ctypes.sizeof(EventAttributes)
    attributes.category = category
    attributes.colorType = _COLOR_ARGB
    attributes.color = color & 0xFFFFFFFF
    if payload is not None:
        attributes.payloadType = _PAYLOAD_INT64
        attributes.payload.llValue = int(payload)
    attributes.messageType = _MESSAGE_ASCII
    attributes.message.ascii = message
    return attributes


_tool: Tool | None = None
_lock = threading.Lock()


def tool() -> Tool:
    """This process's NVTX tool, attached at the first call (as NVTX attaches at its first API call)."""
    global _tool
    if _tool is None:
        with _lock:
            if _tool is None:
                _tool = Tool(os.environ.get(INJECTION_ENV) or None)
                if _tool.problem:
                    log.warning("rlprof nsys: %s; no NVTX ranges will be recorded", _tool.problem)
    return _tool
