"""runners.compare: the rank test, the SAME / FAST / SLOW rule on seeded synthetic samples, and the CLI on
synthetic stores (matching by trial, named environment differences, only-in lists, the CI gate)."""

import json

import numpy as np
import pytest

from runners import compare
from runners.results.store import ResultStore
from tests.synthetic_store import SHAPES, SPACE, row, samples, softmax_sweep


def test_rank_test_matches_the_textbook_value():
    # SciPy's documented example (mannwhitneyu, method="asymptotic"): p = 0.11134688653314041.
    assert compare.rank_test([19, 22, 16, 29, 24], [20, 11, 17, 12]) == pytest.approx(
        0.11134688653314041, rel=1e-9
    )
    a, b = [3.0, 1.0, 2.0, 5.0], [4.0, 6.0, 7.0]
    assert compare.rank_test(a, b) == compare.rank_test(b, a)  # two-sided
    assert compare.rank_test([5.0] * 10, [5.0] * 12) == 1.0  # all tied: no evidence either way
    assert compare.rank_test([1.0], [2.0, 3.0]) == 1.0


@pytest.mark.parametrize("n, tail, seeds", [(30, 0.05, 200), (200, 0.05, 40), (10, 0.0, 40)])
def test_shifted_samples_are_fast_or_slow_and_unshifted_are_same(n, tail, seeds):
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        base = samples(50.0, n, rng, tail=tail)
        for factor, expected in ((1.0, "SAME"), (1.05, "SLOW"), (0.95, "FAST")):
            new = samples(50.0 * factor, n, rng, tail=tail)  # drawn afresh: one distribution, other values
            label, p = compare.verdict(base, new, float(np.median(new) / np.median(base)))
            assert label == expected, (seed, n, factor, p)


def test_a_real_shift_below_the_minimum_effect_is_same_and_few_samples_prove_nothing():
    rng = np.random.default_rng(7)
    base, new = samples(50.0, 2000, rng, noise=0.001), samples(50.5, 2000, rng, noise=0.001)  # +1%
    ratio = float(np.median(new) / np.median(base))
    label, p = compare.verdict(base, new, ratio)
    assert p < 1e-6 and label == "SAME"  # significant, but below the 2% minimum effect
    assert compare.verdict(base, new, ratio, min_effect=0.005)[0] == "SLOW"
    few_base, few_new = samples(50.0, 5, rng), samples(100.0, 5, rng)  # 2x slower, 5 samples a side
    assert compare.verdict(few_base, few_new, 2.0) == ("SAME", pytest.approx(0.0122, abs=1e-3))


@pytest.mark.parametrize("text, value", [("2%", 0.02), ("0.5%", 0.005), ("0.02", 0.02), ("0", 0.0)])
def test_shares_parse(text, value):
    assert compare.parse_share(text, "--fail-on-slow") == pytest.approx(value)


@pytest.mark.parametrize("text, words", [("2", "ambiguous"), ("abc", "not a share"), ("150%", "between")])
def test_bad_shares_name_the_flag(text, words, tmp_path, capsys):
    store = ResultStore(tmp_path / "r.sqlite")
    softmax_sweep(store, "base")
    store.close()
    status = compare.main([f"--store={tmp_path}/r.sqlite", "base", "base", "--fail-on-slow", text])
    error = capsys.readouterr().err
    assert status == 2 and "--fail-on-slow" in error and words in error


@pytest.fixture
def stores(tmp_path):
    """One store holding base, a re-run of it (fresh samples), a 5% slower sweep from another GPU and
    kernel source over a smaller space, and a sweep where one config broke; plus a second store file."""
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    softmax_sweep(store, "base", seed=0)
    softmax_sweep(store, "again", seed=1)
    smaller = {**SPACE, "num_warps": (2, 4, 8)}
    softmax_sweep(
        store, "slower", seed=2, slower=1.05, space=smaller, gpu_name="Other GPU", kernel_hash="bbbbbbbbbbbb"
    )
    broken_config = {"BLOCK_SIZE": 2048, "num_warps": 4, "num_stages": 1}
    store.append(
        row("broken", "triton", SHAPES[0], broken_config, None, np.random.default_rng(3), status="incorrect")
    )
    # The old timer's rows: CUDA-event times ~3 us a call longer, no timing_method recorded.
    softmax_sweep(store, "old_timer", seed=5, slower=1.2, timing_method=None)
    store.close()
    other = ResultStore(tmp_path / "other.sqlite")
    softmax_sweep(other, "elsewhere", seed=4, finalists=False)
    other.close()
    return path, tmp_path / "other.sqlite"


def _run(capsys, *args):
    status = compare.main(list(args))
    out = capsys.readouterr()
    return status, out.out, out.err


def _verdicts(text: str, section: int = 0) -> dict:
    """(provider, shape, config) -> (phase, verdict) from the report's markdown table number `section`."""
    table = text.split("## ")[1 + section]
    cells = [line.strip("| ").split(" | ") for line in table.splitlines() if line.startswith("| softmax")]
    return {(c[1], c[3], c[4]): (c[-6], c[-1]) for c in cells}


def test_a_rerun_is_same_everywhere_and_passes_the_gate(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "again", "--fail-on-slow", "2%")
    verdicts = _verdicts(out)
    # 4096x1024: 16 configs, 1 incorrect; 4096x4096: 8 pruned, 1 incorrect, 7 ok; 2 baselines a shape.
    assert len(verdicts) == 15 + 7 + 2 * 2
    assert {v for _, v in verdicts.values()} == {"SAME"}
    assert "environment: the same for every matched row" in out
    assert "0 only in BASE, 0 only in NEW" in out and "gate --fail-on-slow 2%: pass" in out
    assert status == 0
    # Trials both sides re-timed as finalists compare their finalist rows; the others their screening.
    store = ResultStore(path)
    finals = [
        set(f[f["phase"] == "final"]["config"]) for f in (store.load(sweep_id=s) for s in ("base", "again"))
    ]
    store.close()
    both = {" ".join(f"{k}={v}" for k, v in json.loads(c).items()) for c in finals[0] & finals[1]}
    assert both and {k[2] for k, v in verdicts.items() if v[0] == "final"} == both


def test_a_slower_sweep_is_slow_matched_by_trial_and_fails_the_gate(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "slower")
    verdicts = _verdicts(out)
    ours = {k: v for k, v in verdicts.items() if k[0] == "triton"}
    baselines = {k: v for k, v in verdicts.items() if k[0] != "triton"}
    assert ours and {v for _, v in ours.values()} == {"SLOW"}
    assert len(baselines) == 4 and {v for _, v in baselines.values()} == {"SAME"}  # baselines were not slowed
    assert {v for _, v in _verdicts(out, section=1).values()} == {"SLOW"}  # each shape's winner
    # Rows of another GPU and kernel source are matched by trial, and the differences are named.
    assert (
        "gpu_name: Synthetic GPU -> Other GPU" in out and "kernel_hash: aaaaaaaaaaaa -> bbbbbbbbbbbb" in out
    )
    only_base = out.split("only in BASE (")[1].split("\n\n")[0]
    assert only_base.startswith("8):")  # num_warps=1 is not in the smaller space: 2 shapes x 4 blocks
    assert all("num_warps=1 " in line for line in only_base.splitlines()[1:])
    assert "only in NEW (" not in out and "8 only in BASE, 0 only in NEW" in out and status == 0  # no gate
    assert _run(capsys, f"--store={path}", "base", "slower", "--fail-on-slow", "2%")[0] == 1
    assert _run(capsys, f"--store={path}", "base", "slower", "--fail-on-slow", "10%")[0] == 0
    # NEW against BASE the other way round: FAST.
    status, out, _ = _run(capsys, f"--store={path}", "slower", "base", "--fail-on-slow", "2%")
    assert {v for k, (_, v) in _verdicts(out).items() if k[0] == "triton"} == {"FAST"} and status == 0


def test_a_config_that_broke_is_listed_and_fails_the_gate(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "broken", "--fail-on-slow", "50%")
    assert (
        "status changed (1):\n  ok -> incorrect: softmax triton float16 4096x1024 BLOCK_SIZE=2048 num_warps=4"
        in out
    )
    assert "1 ok in BASE and failing in NEW" in out and status == 1


def test_stores_by_path_and_path_with_sweep_id(stores, capsys):
    path, other = stores
    status, out, _ = _run(capsys, f"{path}:base", str(other))
    assert out.startswith(f"BASE: sweep base in {path}\nNEW:  every trial in {other}")
    # The other store has no finalists: the first shape's top 3 compare screening rows on both sides.
    assert {phase for phase, _ in _verdicts(out).values()} == {"screen"} and status == 0


def test_an_unknown_sweep_names_the_argument_and_the_sweeps_there(stores, capsys):
    path, _ = stores
    status, _, err = _run(capsys, f"--store={path}", "base", "nope")
    assert status == 2 and "NEW: no sweep 'nope'" in err and "again, base, broken, old_timer, slower" in err
    status, _, err = _run(capsys, "--store=/nonexistent/r.sqlite", "base", "again")
    assert status == 2 and "BASE:" in err and "/nonexistent/r.sqlite" in err


def test_the_slower_softmax_revision_matches_softmax_trial_by_trial():
    """tests/softmax_twice.py, the NEW side of the GPU comparison (.ci/gpu compare): the same trials as
    softmax, another source hash, and still correct (launched twice into the same output)."""
    import torch

    from kernels import softmax
    from runners.engine.trials import kernel_source_hash, plan_trials
    from runners.measure.check import TOLERANCES
    from tests import softmax_twice

    conf = {
        "shapes": [[6, 123]],
        "dtypes": ["float16"],
        "space": {"BLOCK_SIZE": [128, 256]},
        "baselines": ["torch"],
    }
    keys = [
        [t.key for t in plan_trials(spec, conf, "interpret")] for spec in (softmax.SPEC, softmax_twice.SPEC)
    ]
    assert len(keys[0]) > 2 and keys[0] == keys[1]
    assert kernel_source_hash(softmax.SPEC) != kernel_source_hash(softmax_twice.SPEC)
    (x,) = softmax.SPEC.make_inputs((6, 123), torch.float16, 0, "cpu")
    out = torch.full_like(x, float("nan"))
    softmax_twice.SPEC.launch((x,), out, {"BLOCK_SIZE": 128, "num_warps": 2, "num_stages": 1})
    rtol, atol = TOLERANCES["float16"]  # the correctness gate's
    torch.testing.assert_close(out.double(), softmax.softmax_ref(x.double()), rtol=rtol, atol=atol)


def test_rows_of_another_timing_method_get_no_verdict_and_pass_the_gate(stores, capsys):
    path, _ = stores
    status, out, _ = _run(capsys, f"--store={path}", "base", "old_timer", "--fail-on-slow", "2%")
    verdicts = _verdicts(out)
    assert verdicts and {v for _, v in verdicts.values()} == {"OTHER TIMER"}  # 20% slower, yet no SLOW
    assert "timing_method: cupti/read-flush -> None" in out and status == 0
