"""dry_run=true on the interpreter (runners/engine/dry_run.py): it writes nothing and starts no worker,
and what it plans is what the run then does: the trials measured, pruned (by reason) and, run again,
kept from the store."""
import re
from collections import Counter

import pytest

from triton_sweep.engine.dry_run import plan_groups, reason_kind
from triton_sweep.model.trial import Trial
from tests.conftest import HAS_CUDA, run_sweep, sweep_rows, user_env

# tests/fixtures/slow_import_kernel.py (softmax, named slow_import_softmax): each process that imports
# it appends its pid to SLOW_IMPORT_MARKER, so a worker started would show as a second import.
# Per shape, 8 configs: at 4x64, BLOCK_SIZE 32 (< the row) and 256 (4x it) pruned; at 2x128, 32 and 64.
SOFTMAX = ["kernel=external", "kernel.spec=tests.fixtures.slow_import_kernel:SPEC",
           "kernel.shapes=[[4,64],[2,128]]", "kernel.dtypes=[float32]", "kernel.baselines=[torch]",
           "+kernel.space.BLOCK_SIZE=[32,64,128,256]", "+kernel.space.num_warps=[1,2]"]
TOTAL = re.compile(r"total: (\d+) trials? to measure \((\d+) configs?, (\d+) baselines?\); (\d+) trials? kept"
                   r".*; (\d+) pruned")
REASON = re.compile(r"^ +(\d+)  (.+)$", re.MULTILINE)


def _planned(stdout: str) -> dict:
    found = TOTAL.search(stdout)
    assert found, stdout
    measured, configs, baselines, kept, pruned = map(int, found.groups())
    reasons = dict((reason, int(count)) for count, reason in REASON.findall(stdout))
    return {"measure": measured, "configs": configs, "baselines": baselines, "kept": kept, "pruned": pruned,
            "reasons": reasons}


def _everything_under(folder) -> set:
    return {str(path.relative_to(folder)) for path in folder.rglob("*")}


def test_a_dry_run_writes_nothing_and_plans_what_the_run_then_does(tmp_path):
    marker = tmp_path / "cwd" / "imported"
    env = user_env(SLOW_IMPORT_S="0", SLOW_IMPORT_MARKER=str(marker))
    # W&B offline: a run would write its files under logger.dir (tmp_path)
    dry = run_sweep(tmp_path, *SOFTMAX, "dry_run=true", "logger.mode=offline", env=env)
    assert "shape" in dry.stdout and "4x64" in dry.stdout and "2x128" in dry.stdout
    assert "a guess" in dry.stdout  # no earlier row of the kernel: the time is a stated guess
    # No store, run folder, export or W&B file; the kernel's module imported by this process alone.
    assert _everything_under(tmp_path) == {"cwd", "cwd/imported"}
    assert len(marker.read_text().split()) == 1
    plan = _planned(dry.stdout)
    assert plan["kept"] == 0

    run = run_sweep(tmp_path, *SOFTMAX, env=env)
    assert len(set(marker.read_text().split())) >= 2  # the run's worker imported it too
    rows = sweep_rows(tmp_path, "run")
    pruned = rows[rows["status"] == "pruned"]
    measured = rows[(rows["status"] != "pruned") & (rows["phase"] == "screen")]
    assert plan["pruned"] == len(pruned) == 8
    assert plan["measure"] == len(measured) == 10
    assert plan["configs"] == (measured["provider"] == "triton").sum()
    assert plan["baselines"] == (measured["provider"] != "triton").sum()
    assert plan["reasons"] == dict(Counter(reason_kind(message) for message in pruned["message"]))
    assert len(plan["reasons"]) == 2, run.stdout

    before = _everything_under(tmp_path)
    again = run_sweep(tmp_path, *SOFTMAX, "dry_run=true", env=env)
    resumed = _planned(again.stdout)
    assert (resumed["measure"], resumed["kept"], resumed["pruned"]) == (0, len(measured), 8)
    assert "earlier rows of slow_import_softmax" in again.stdout  # the estimate: from the store's rows
    assert _everything_under(tmp_path) == before
    assert len(sweep_rows(tmp_path, "run")) == len(rows)


def test_a_dry_multirun_plans_each_job_and_leaves_no_folder(tmp_path):
    result = run_sweep(tmp_path, *SOFTMAX[:-1], "+kernel.space.num_warps=1,2", "dry_run=true", multirun=True,
                       env=user_env(SLOW_IMPORT_S="0"))
    totals = [_planned(line) for line in result.stdout.splitlines() if line.startswith("total:")]
    assert [(t["measure"], t["pruned"]) for t in totals] == [(6, 4), (6, 4)]  # each with its baselines
    assert _everything_under(tmp_path) == {"cwd"}


@pytest.mark.skipif(HAS_CUDA, reason="plans for a GPU where none is visible")
def test_a_dry_run_for_a_gpu_plans_where_none_is_visible(tmp_path):
    result = run_sweep(tmp_path, *SOFTMAX, "dry_run=true", backend="cuda",
                       env=user_env(SLOW_IMPORT_S="0"))
    assert "no CUDA GPU is visible here" in result.stdout
    assert "a guess" in result.stdout and _planned(result.stdout)["measure"] == 10
    assert _everything_under(tmp_path) == {"cwd"}


def _trial(block: int, shape=(4, 64), pruned=None) -> Trial:
    return Trial("k", "triton", shape, "float32", {"BLOCK_SIZE": block}, pruned)


def test_a_search_that_asks_in_rounds_is_planned_at_most_its_budget():
    trials = [_trial(b) for b in (64, 128, 256, 512)] + [_trial(32, pruned="BLOCK_SIZE 32 < row length 64")]
    kept = {trials[0].key}
    exact = plan_groups(trials, trials[:2], kept, up_front=True, budget=2)
    rounds = plan_groups(trials, trials[:1], kept, up_front=False, budget=3)
    assert [(g["to_run"], g["kept"], g["to_measure"], g["pruned"]) for g in exact + rounds] == [
        (2, 1, 1, 1), (3, 1, 2, 1)]
    assert reason_kind("BLOCK_SIZE 32 < row length 64") == reason_kind("BLOCK_SIZE 64 < row length 128")
