"""One rule for rollout ``ranks`` in every doc and message (issue 34): they count replica ranks.

Seed 000: "ranks in the Rollout configuration refers to Replica Rank (inference instance index), not
Global Rank". verl 0.9.1's own code reads them as global GPU ranks; our docs may say so only as
verl's reading, beside our rule (docs/verl.md, "Deliberate differences")."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TEXTS = sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("plugins/*/README.md"),
                *ROOT.glob("core/rlprof/**/*.py")])

RANKS_ARE_GLOBAL = re.compile(r"ranks`?\s*(?:\(|:|=|are|count|counts|list|lists|mean|means)\s*(?:the\s+)?global (?:GPU )?ranks",
                              re.IGNORECASE)
"""A text saying rollout ranks are global ranks: "`ranks` (global GPU ranks", "ranks are global GPU ranks"."""

VERLS_MAPPING = re.compile(r"rank\s*//\s*(?:replica_world_size|\(tp|gpus_per_replica|tp)")
"""verl 0.9.1's global-rank-to-replica mapping, written out."""


def paragraphs(path: Path) -> list[str]:
    """The file's paragraphs (blank-line separated), each on one line: a rule wrapped over lines reads whole."""
    text = path.read_text(encoding="utf-8")
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_the_texts_are_found():
    names = {p.name for p in TEXTS}
    assert {"verl.md", "engines.md", "configuration.md", "README.md", "plan.py", "dist_profiler.py"} <= names


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_text_says_rollout_ranks_are_global_ranks(path):
    for paragraph in paragraphs(path):
        if "rollout" not in paragraph.lower() and "replica" not in paragraph.lower():
            continue  # training roles' ranks are global ranks
        assert not RANKS_ARE_GLOBAL.search(paragraph), f"{path.name}: {paragraph[:300]}"
        ours = "replica rank" in paragraph.replace("*", "").lower()
        if re.search(r"global GPU ranks?", paragraph, re.IGNORECASE):  # "not global GPU ranks", "held by replica"
            assert ours, f"{path.name}: global GPU ranks without the rule: {paragraph[:300]}"
        if VERLS_MAPPING.search(paragraph):  # only as verl's reading, said beside ours
            assert "verl" in paragraph and ours, f"{path.name}: verl's mapping without the rule: {paragraph[:300]}"


@pytest.mark.parametrize("doc", ["docs/configuration.md", "docs/engines.md", "docs/verl.md"])
def test_the_docs_that_describe_rollout_ranks_say_replica_ranks(doc):
    text = " ".join((ROOT / doc).read_text(encoding="utf-8").split())
    assert re.search(r"ranks`? count (?:\*\*)?replica(?:\*\*)? ranks", text), doc
    assert "not global GPU ranks" in text or "not Global Rank" in text, doc


def test_the_check_message_and_the_drop_in_agree():
    """The two places rlprof reads rollout ranks say the same rule in their own words."""
    from rlprof.runtime import plan

    rule = " ".join(plan.__doc__.split())
    assert "counts the replica rank" in rule and "not Global Rank" in rule
    source = (ROOT / "core/rlprof/integrations/verl/rollout_profiler.py").read_text(encoding="utf-8")  # the replica's profiler
    assert "``ranks`` count **replica** ranks" in source
