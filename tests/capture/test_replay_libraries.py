"""Replay of what real libraries' kernels do (tests/fixtures/replay_wrapped.py, on the interpreter): a kernel
under a library's own subclass of Triton's Autotuner inside an @triton.heuristics, over variable-length
offsets; one behind a wrapper of the library's own holding it as `.fn`; a fixed grid and the shape's
names; a reduction whose configs only reorder its sums at large magnitudes (fp32 and bf16), next to
configs that really are wrong."""
import json
from types import SimpleNamespace

import pytest
import torch

from triton_sweep.capture.replay import ORDER_SPREAD, Replay
from triton_sweep.capture.replay_kernel import unwrapped
from triton_sweep.measure import check
from triton_sweep.measure.check import compare_outputs, reorder_bounds
from triton_sweep.measure.inputs import ShapeCache
from triton_sweep.model.spec_sources import load_spec
from triton_sweep.model.trial import ConfigError
from tests.capture.test_replay import _capture, swept
from tests.conftest import REPO

WRAPPED = REPO / "tests" / "fixtures" / "replay_wrapped.py"


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory):
    return _capture(tmp_path_factory.mktemp("wrapped"), WRAPPED)


def _replay(wrapped, function: str, **options) -> Replay:
    folder, _ = wrapped
    return Replay(folder / "app_launches.json", f"__main__.{function}", None, **options)


def _run(replay: Replay, inputs: tuple, config: dict) -> tuple:
    out = replay.output_like(inputs)
    replay.prepare_output(inputs, out)
    replay.launch(inputs, out, {"num_warps": 1, "num_stages": 1, **config})
    return out


def test_the_capture_writes_a_sweep_file_for_each_kernel_and_says_so(wrapped):
    folder, printed = wrapped
    assert sorted(p.name for p in (folder / "conf" / "sweep").iterdir()) == [
        "app_chunked_copy.yaml", "app_row_sum.yaml", "app_segment_sum.yaml", "app_softmax_backward.yaml"]
    assert "no sweep file written" not in printed and "no launch of a known kernel" not in printed
    assert ("# Launched with a fixed grid: BLOCK kept as launched; to vary, append ;grid=<the grid, e.g. "
            "cdiv(n, BLOCK)> to kernel.spec.") in (folder / "conf" / "sweep" / "app_row_sum.yaml").read_text()


def test_a_library_autotuner_and_its_heuristics_replay_over_the_librarys_configs(wrapped, tmp_path):
    """The subclass is unwrapped by what it is (a name-based unwrap called its run: "got multiple values
    for keyword argument"); its configs (which set BS) are the space, the heuristic (IS_VARLEN) computed
    at each launch: variable-length offsets and fixed-length segments both replay, under the program's
    fixed grid (its autotuner launched every config with it)."""
    replay = _replay(wrapped, "segment_sum")
    assert type(replay.kernel.jit).__name__ in ("JITFunction", "InterpretedFunction")
    assert [name for name, _ in replay.kernel.heuristics] == ["IS_VARLEN"]
    rows = swept(wrapped, tmp_path, "segment_sum")
    assert set(rows["status"]) == {"ok"}, rows["message"].dropna().tolist()
    configs = {json.dumps(c, sort_keys=True) for c in rows["config"]}
    assert configs == {json.dumps({"BS": bs, "num_stages": 3, "num_warps": w}, sort_keys=True)
                       for bs in (16, 32) for w in (1, 2)}
    # T is 0 at the varlen launch (a flag, not a size): the two launches differ in their offsets alone
    assert replay.dims == ["x_ptr_shape0", "launch"] and len(rows) == 8


def test_a_callable_grid_is_evaluated_at_every_autotune_config_whatever_its_keys_are_named(wrapped):
    """FLA's grids read BS, an autotune key: the capture's table of the grid is keyed by it too (keyed by
    BLOCK-named ones alone, every config got the launched one's grid: half the output unwritten)."""
    replay = _replay(wrapped, "chunked_copy")
    inputs = replay.make_inputs(replay.spec().default_shapes[0], torch.float32, 0, "cpu")
    references = replay.reference(*inputs)
    for bs in (16, 32):
        config = {"BS": bs, "num_warps": 4, "num_stages": 3}
        assert replay.grid_at(replay.records[0], config) == (-(-100 // bs),)
        assert compare_outputs(_run(replay, inputs, config), references) is None


def test_a_wrapper_holding_the_kernel_as_fn_is_unwrapped_and_anything_else_is_named(wrapped):
    replay = _replay(wrapped, "_row_sum")
    inputs = replay.make_inputs((100, 4), torch.float32, 0, "cpu")
    assert compare_outputs(_run(replay, inputs, {"BLOCK": 32}), replay.reference(*inputs)) is None

    class Holder:
        fn = None

    with pytest.raises(ConfigError, match="kernel.spec: m.k is a Holder: no @triton.jit function found in"):
        unwrapped(Holder(), "m.k")


def test_a_fixed_grid_keeps_the_blocks_it_was_launched_at_unless_the_target_gives_the_grid(wrapped):
    """The row sum was launched on 4x100 and 8x300 tensors with a grid of one program a row: its dims are
    the row length (n_cols) and the rows (the tensor's axis 0), never dropped."""
    replay = _replay(wrapped, "_row_sum")
    assert replay.dims == ["n_cols", "x_ptr_shape0"] and replay.spec().default_shapes == ((100, 4), (300, 8))
    config = {"BLOCK": 64, "num_warps": 1, "num_stages": 1}
    assert replay.constraints((300, 8), "float32", config).startswith(
        "the program launched a fixed grid (8,) at BLOCK=32: a grid computed from its blocks would not fit "
        "BLOCK=64")
    given = _replay(wrapped, "_row_sum", grid="x_ptr_shape0")
    inputs = given.make_inputs((300, 8), torch.float32, 0, "cpu")
    references = given.reference(*inputs)
    for block in (8, 64, 512):
        assert given.constraints((300, 8), "float32", {**config, "BLOCK": block}) is None
        assert compare_outputs(_run(given, inputs, {"BLOCK": block}), references,
                               bound=reorder_bounds(inputs, references)) is None
    with pytest.raises(ConfigError, match=r"kernel.spec: grid='n_cols': gives \(100,\) at launch 1 \(BLOCK=32"
                                          r".*\), where the program launched \(4,\)"):
        _replay(wrapped, "_row_sum", grid="n_cols")
    with pytest.raises(ConfigError, match="kernel.spec: grid='rows': rows is not one of BLOCK, n_cols, "):
        _replay(wrapped, "_row_sum", grid="rows")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_config_that_only_reorders_a_reduction_is_correct_and_a_wrong_one_is_not(wrapped, dtype):
    """softmax backward over rows of 192 at a scale of 1000: blocks of 8, 16 and 64 divide the row (its
    sums in another order than the program's 32), 128 leaves the row's tail out (wrong by O(the values))."""
    replay = _replay(wrapped, "softmax_backward")
    inputs = replay.make_inputs((192,), dtype, 0, "cpu")
    references = replay.reference(*inputs)
    bounds = reorder_bounds(inputs, references)
    fixed, scaled = {}, {}
    for block in (8, 16, 64, 128):
        out = _run(replay, inputs, {"BLOCK": block})
        fixed[block], scaled[block] = compare_outputs(out, references), compare_outputs(out, references,
                                                                                        bound=bounds)
    assert [scaled[block] for block in (8, 16, 64)] == [None] * 3
    if dtype is torch.float32:  # a tolerance of the dtype alone failed them: the case is real
        assert all("elements outside rtol=1e-05 atol=1e-05;" in fixed[block] for block in (8, 16, 64))
    assert "(sums in another order)" in scaled[128] and "elements outside" in scaled[128]


def test_a_kernel_whose_own_sums_move_with_num_warps_is_allowed_that_much(wrapped, monkeypatch):
    """On a GPU the program's config at half and twice its num_warps sums in other orders (a kernel that
    sums in bf16 moves by bf16's units); the interpreter has no warps, so here its outputs are moved by
    hand: the bound is ORDER_SPREAD times the move where that passes fp32's rule."""
    replay = _replay(wrapped, "softmax_backward")
    inputs = replay.make_inputs((192,), torch.float32, 0, "cpu")
    static = reorder_bounds(inputs, replay.reference(*inputs))
    call = replay._call

    def warps_move_the_sums(record, values, config):
        call(record, values, config)
        values[0].add_(0.5 * (config.get("num_warps", 4) != 4))  # dx: another order's result

    monkeypatch.setattr(replay, "_call", warps_move_the_sums)
    bound = replay.accumulation_bound(*inputs)
    assert static[0] < 2 and bound[0] == pytest.approx(ORDER_SPREAD * 0.5, rel=1e-3)
    assert bound[1:] == static[1:]  # y and dy: not moved


def test_the_gate_of_every_trial_allows_the_reordering_of_a_reference_in_the_kernels_own_arithmetic(wrapped):
    """The worker's inputs cache gives the gate the spec's accumulation bound (a replay's: its own sums in
    other orders, above), reorder_bounds for a spec of a reference in its own arithmetic without one; a
    float64 reference never gets it."""
    replay = _replay(wrapped, "softmax_backward")
    trial = SimpleNamespace(kernel=replay.name, shape=(192,), dtype="float32")
    inputs, references, bound = ShapeCache(replay.spec(), 0, torch.device("cpu")).get(trial, with_bound=True)
    assert bound == reorder_bounds(inputs, references) and len(bound) == 3  # dx, y and dy: every tensor
    assert check.REORDER_UNITS * torch.finfo(torch.float32).eps * float(references[0].abs().max()) == bound[0]
    softmax = SimpleNamespace(**{**vars(load_spec("softmax", None)), "accumulation_bound": None})
    assert ShapeCache(softmax, 0, torch.device("cpu")).get(
        SimpleNamespace(kernel="softmax", shape=(4, 64), dtype="float32"), with_bound=True)[2] is None
