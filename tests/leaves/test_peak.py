"""The peak MFU is divided by (rlprof.peak): which one is used, a configured one that is too low refused with
the reason, the calibration measured once per run and host, and the config key's checks."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlprof import ConfigError, load_config
from rlprof import peak as peak_module
from rlprof.peak import BEATEN, CONFIGURED, MEASURED, SPEC, resolve, run_peak, spec_tflops


def test_the_spec_table_is_keyed_by_the_name_the_device_reports_and_the_dtype():
    assert spec_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.4
    assert spec_tflops("NVIDIA H100 PCIe", "bf16") == 756.0  # the variant before its family
    assert spec_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 19.5
    assert spec_tflops("NVIDIA H20", "bf16") == 148.0 and spec_tflops("NVIDIA H200", "bf16") == 989.4
    assert spec_tflops("AMD EPYC 7B13", "fp32") is None  # a CPU: measured
    assert spec_tflops("Tesla V100-SXM2-32GB", "bf16") is None  # no bf16 on a V100


def test_a_configured_peak_is_used_unless_the_device_measured_more():
    used = resolve("NVIDIA H100 80GB HBM3", "bf16", configured=900.0, measured=700.0)
    assert (used.tflops, used.source, used.refused) == (900.0, CONFIGURED, None)
    assert resolve("NVIDIA H100 80GB HBM3", "bf16", measured=700.0).source == SPEC
    too_low = resolve("NVIDIA H100 80GB HBM3", "bf16", configured=98.9, measured=700.0)  # ten times too low
    assert (too_low.tflops, too_low.source) == (989.4, SPEC)
    assert "peak_tflops=98.9 is refused" in too_low.refused and "700" in too_low.refused
    cpu = resolve("AMD EPYC", "fp32", configured=0.01, measured=0.2)
    assert (cpu.tflops, cpu.source) == (0.2, MEASURED) and "refused" in cpu.refused
    assert resolve("AMD EPYC", "fp32", configured=0.2 / BEATEN * 1.01, measured=0.2).source == CONFIGURED  # noise: kept
    assert resolve("AMD EPYC", "fp32").tflops is None


def test_the_calibration_is_measured_once_per_run_and_host(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(peak_module, "calibrate", lambda device, dtype: calls.append((device, dtype)) or 0.5)
    monkeypatch.setattr(peak_module, "_resolved", {})
    monkeypatch.setattr(peak_module, "_measured", {})
    first = run_peak(tmp_path, "host-a", "cpu")
    assert (first.tflops, first.source, first.measured_tflops) == (0.5, MEASURED, 0.5) and calls == [("cpu", "fp32")]
    monkeypatch.setattr(peak_module, "_resolved", {})  # as another process of the host would start
    monkeypatch.setattr(peak_module, "_measured", {})
    assert run_peak(tmp_path, "host-a", "cpu").measured_tflops == 0.5 and len(calls) == 1  # read, not measured
    [written] = (tmp_path / "peak").glob("host-a-*-fp32.json")
    assert json.loads(written.read_text())["tflops"] == 0.5
    run_peak(tmp_path, "host-b", "cpu")
    assert len(calls) == 2  # another host measures its own


def test_another_process_of_the_host_waits_for_the_first_calibration_and_reads_it(tmp_path):
    """Two processes ask at once: one measures, the other reads what it wrote (the lock)."""
    code = ("import sys, time; import rlprof.peak as p; p.calibrate = lambda d, t: (time.sleep(0.5), 0.25)[1]; "
            f"print(p.run_peak({str(tmp_path)!r}, 'h', 'cpu').measured_tflops)")
    both = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert [float(p.communicate(timeout=60)[0]) for p in both] == [0.25, 0.25]
    assert len(list((tmp_path / "peak").glob("h-*.json"))) == 1


@pytest.mark.parametrize("value", ["989", 0, -1.0, True, float("nan"), float("inf"), 1e9, [989]])
def test_a_bad_peak_tflops_names_the_key_the_value_and_what_is_allowed(value):
    with pytest.raises(ConfigError) as caught:
        load_config({"global_profiler": {"tool": "torch", "steps": [1], "peak_tflops": value}})
    assert "global_profiler.peak_tflops" in str(caught.value) and "TFLOP/s" in str(caught.value)


def test_peak_tflops_reaches_every_hook_as_the_runs_peak(tmp_path):
    config = load_config({"global_profiler": {"tool": "torch", "steps": [1], "peak_tflops": 12.5}})
    assert config.global_.peak_tflops == 12.5
    assert load_config({"global_profiler": {"tool": "torch", "steps": [1]}}).global_.peak_tflops is None
