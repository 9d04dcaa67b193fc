"""Stand-in for ``torch_npu.profiler.experimental_config``: the values are the real constants."""

from typing import Optional, Union

from ..recording import LOG

__all__ = ["_ExperimentalConfig", "ProfilerLevel", "AiCMetrics", "ExportType"]


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


class _ExperimentalConfig:
    def __init__(
        self,
        profiler_level: int = ProfilerLevel.Level0,
        aic_metrics: int = AiCMetrics.PipeUtilization,
        l2_cache: bool = False,
        msprof_tx: bool = False,
        mstx: bool = False,
        data_simplification: bool = True,
        record_op_args: bool = False,
        op_attr: bool = False,
        gc_detect_threshold: Optional[float] = None,
        export_type: Union[str, list] = ExportType.Text,
        host_sys: Optional[list] = None,
        mstx_domain_include: Optional[list] = None,
        mstx_domain_exclude: Optional[list] = None,
        sys_io: bool = False,
        sys_interconnection: bool = False,
    ):
        self.profiler_level = profiler_level
        self.export_type = export_type
        self.mstx = mstx
        self.msprof_tx = msprof_tx
        LOG.record("_ExperimentalConfig", profiler_level=profiler_level, export_type=export_type, mstx=mstx,
                   msprof_tx=msprof_tx, data_simplification=data_simplification, aic_metrics=aic_metrics)
