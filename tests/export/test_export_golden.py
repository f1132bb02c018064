"""The export, byte for byte: synthetic stores (every row drawn from a seeded generator, no kernel run)
exported with the kernel's settings, against the files the export wrote before, timestamps aside:
softmax_configs.* before the export became one package (issue 34); softmax_wide_configs.* (48 shapes, 24
points, two dtypes, p50s jittered) and softmax_calls_configs.* (the same, weighted by calls) before the
covering set and the leave-one-out became arrays (issue 76). A change of what an export holds or how its
module reads is a change of these files, made on purpose (regenerate them with
`python -m tests.export.test_export_golden`)."""
import re
import sys
from pathlib import Path

import numpy as np

from triton_sweep.kernels import softmax
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import noisy_run, softmax_sweep

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
KINDS = ((4096, 1024), (4096, 1020), (4096, 2048), (4096, 2044), (4096, 4096))  # both kinds of row length
WIDE_COLS = sorted({256 + 384 * i for i in range(12)} | {252 + 384 * i for i in range(12)})
WIDE = tuple((rows, cols) for cols in WIDE_COLS for rows in (2048, 4096))  # two shapes a point of the key
WIDE_SPACE = {"BLOCK_SIZE": (256, 512, 1024, 2048, 4096, 8192), "num_warps": (1, 2, 4, 8),
              "num_stages": (1, 2)}
WIDE_CALLS = {shape: 1 + (7 * i) % 5 for i, shape in enumerate(WIDE)}


def _stores(tmp: Path, columns=None) -> dict:
    """kernel name -> the rows of a seeded synthetic sweep: softmax-like runs at the default shapes and at
    lengths of both kinds (the estimate's apart/together choice), finalists re-timed in repetitions; and
    48 shapes of a 48-config space in two dtypes, pruned and incorrect configs among them, every p50
    jittered by 4% so that winners and covering sets vary."""
    path = tmp / "golden.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(2026)
    noisy_run(store, "golden", rng, shapes=KINDS, placement_noise=dict.fromkeys(KINDS, 0.004))
    for seed, dtype in enumerate(("float16", "bfloat16")):
        softmax_sweep(store, "wide", seed=seed, shapes=WIDE, space=WIDE_SPACE, dtype=dtype,
                      kernel="softmax_wide")
    frame = store.load(columns=columns)
    store.close()
    wide = frame[frame["kernel"] == "softmax_wide"].copy()
    wide["p50_us"] *= np.exp(np.random.default_rng(76).normal(0.0, 0.04, len(wide)))
    return {"softmax": frame[frame["kernel"] == "softmax"], "softmax_wide": wide,
            "softmax_calls": wide.assign(kernel="softmax_calls")}


def _normalized(text: str) -> str:
    """The file less its export time (the one thing that may differ between two exports of one store)."""
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "EXPORTED_AT", text)


def written(tmp: Path, columns=None) -> dict[str, str]:
    from triton_sweep.export import export_kernel

    files = {}
    for kernel, frame in _stores(tmp, columns).items():
        calls = WIDE_CALLS if kernel == "softmax_calls" else None
        for path in export_kernel(frame, kernel, tmp / "exports", key=dict(softmax.SPEC.export_key),
                                  dims=softmax.SPEC.dims, rule=softmax.SPEC.constraints, calls=calls):
            files[path.name] = _normalized(path.read_text())
    return files


def test_the_export_writes_what_it_wrote_before(tmp_path):
    files = written(tmp_path)
    assert len(files) == 6
    for name, text in files.items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from tests/fixtures/golden/{name}"


def test_the_columns_the_command_loads_export_the_same_files(tmp_path):
    """triton-sweep-export loads STORE_COLUMNS alone (no samples but rep_p50s_us): the same files."""
    from triton_sweep.export import STORE_COLUMNS

    assert "samples_us" not in STORE_COLUMNS
    files = written(tmp_path, STORE_COLUMNS)
    assert files == {name: (GOLDEN / name).read_text() for name in files} and len(files) == 6


if __name__ == "__main__":  # regenerate the golden files
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, text in written(Path(scratch)).items():
            (GOLDEN / name).write_text(text)
            print(f"wrote tests/fixtures/golden/{name}", file=sys.stderr)
