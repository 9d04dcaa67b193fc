"""MFU never above 100% (rlprof.mfu): a figure above is not shown, and what is inconsistent is named."""

from rlprof.mfu import COUNT, FORMULA, PEAK, fraction, inconsistency, shown, why_not_shown


def test_mfu_is_a_fraction_of_the_peak_and_unknown_inputs_give_none():
    assert fraction(5e11, 1.0, 1.0) == 0.5
    assert fraction(None, 1.0, 1.0) is None and fraction(1.0, 0.0, 1.0) is None and fraction(1.0, 1.0, None) is None


def test_a_figure_above_100_percent_is_never_shown():
    assert shown(0.42) == 0.42 and shown(1.0) == 1.0
    assert shown(10.0) is None and shown(None) is None


def test_what_is_inconsistent_is_told_from_the_measured_peak_and_the_count():
    # the device did it in a plain loop: the peak divided by is too low
    assert inconsistency(5e12, 1.0, 6.0, analytic=False) == PEAK
    assert inconsistency(5e12, 1.0, 6.0, analytic=True) == PEAK
    # the device cannot do it: a formula beside a trace's count below 100% claims too much
    assert inconsistency(9e12, 1.0, 6.0, analytic=True, counted_fraction=0.8) == FORMULA
    assert inconsistency(9e12, 1.0, 6.0, analytic=True) == FORMULA
    assert inconsistency(9e12, 1.0, 6.0, analytic=False) == COUNT  # the count claims more than the device can do
    assert inconsistency(9e12, 1.0, None, analytic=False) == PEAK  # nothing contradicts the peak but the figure
    assert inconsistency(0.5e12, 1.0, 6.0, analytic=False) is None  # below 100%: nothing wrong
    assert "the peak is inconsistent" in why_not_shown(PEAK, "configured 0.01 TFLOP/s (cpu, fp32)")
