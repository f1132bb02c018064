"""The export, byte for byte: a synthetic store (every row drawn from a seeded generator, no kernel run)
exported with the kernel's settings, against the files the export wrote before the export became one
package (issue 34), timestamps aside. A change of what an export holds or how its module reads is a
change of these files, made on purpose (regenerate them with `python -m tests.export.test_export_golden`)."""
import re
import sys
from pathlib import Path

import numpy as np

from triton_sweep.kernels import softmax
from triton_sweep.store.result_store import ResultStore
from tests.fixtures.synthetic_store import noisy_run

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
KINDS = ((4096, 1024), (4096, 1020), (4096, 2048), (4096, 2044), (4096, 4096))  # both kinds of row length


def _stores(tmp: Path) -> dict:
    """kernel name -> the rows of a seeded synthetic sweep: softmax-like runs at the default shapes and at
    lengths of both kinds (the estimate's apart/together choice), finalists re-timed in repetitions."""
    path = tmp / "golden.sqlite"
    store = ResultStore(path)
    rng = np.random.default_rng(2026)
    noisy_run(store, "golden", rng, shapes=KINDS, placement_noise=dict.fromkeys(KINDS, 0.004))
    frame = store.load()
    store.close()
    return {"softmax": frame}


def _normalized(text: str) -> str:
    """The file less its export time (the one thing that may differ between two exports of one store)."""
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "EXPORTED_AT", text)


def written(tmp: Path) -> dict[str, str]:
    from triton_sweep.export import export_kernel

    files = {}
    for kernel, frame in _stores(tmp).items():
        for path in export_kernel(frame, kernel, tmp / "exports", key=dict(softmax.SPEC.export_key),
                                  rule=softmax.SPEC.constraints):
            files[path.name] = _normalized(path.read_text())
    return files


def test_the_export_writes_what_it_wrote_before(tmp_path):
    for name, text in written(tmp_path).items():
        assert text == (GOLDEN / name).read_text(), f"{name} differs from tests/fixtures/golden/{name}"


if __name__ == "__main__":  # regenerate the golden files
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        for name, text in written(Path(scratch)).items():
            (GOLDEN / name).write_text(text)
            print(f"wrote tests/fixtures/golden/{name}", file=sys.stderr)
