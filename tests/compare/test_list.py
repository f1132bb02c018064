"""`triton-sweep-compare --list [STORE]`: a line a sweep of the store, newest last, with its kernel,
device, backend and rows (ok, failed, pruned, finalists), from two small interpreter sweeps into one store."""
from triton_sweep.compare import command as compare
from tests.conftest import run_sweep

ADD = ["kernel.shapes=[300]", "kernel.dtypes=[float32]", "kernel.baselines=[]"]


def test_the_list_shows_each_sweep_with_its_rows(tmp_path, capsys):
    # first: BLOCK_SIZE 256 ok, 4096 pruned (> 4x the 512 elements a power of 2 holds)
    run_sweep(tmp_path, "kernel=vector_add", "kernel.space.BLOCK_SIZE=[256,4096]",
              "kernel.space.num_warps=[1]", "sweep_id=first", *ADD)
    # second: a broken copy (its BLOCK_SIZE 512 writes x - y): 256 ok, 512 incorrect, 4096 pruned
    run_sweep(tmp_path, "kernel=external", "kernel.spec=tests.fixtures.vector_add_broken:SPEC",
              "+kernel.space.BLOCK_SIZE=[256,512,4096]", "+kernel.space.num_warps=[1]", "sweep_id=second",
              *ADD)
    store = tmp_path / "results.sqlite"
    assert compare.main(["--list", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["sweep", "kernel", "device"]
    first, second = (line.split() for line in lines[1:3])
    # sweep, kernel, device (3 words), backend, date, time, rows, ok, failed, pruned, finalists (none here)
    assert first[:6] == ["first", "vector_add", "Triton", "interpreter", "(CPU)", "interpret"]
    assert first[-5:] == ["2", "1", "0", "1", "0"]
    assert second[:2] == ["second", "vector_add"] and second[-5:] == ["3", "1", "1", "1", "0"]
    assert lines[3].startswith("2 sweep(s) in") and "newest last" in lines[3]

    assert compare.main(["--list", "--store", str(store)]) == 0  # --list alone: --store's
    assert capsys.readouterr().out.splitlines()[1:3] == lines[1:3]
    assert compare.main(["--list", str(tmp_path / "none.sqlite")]) == 2
    assert "no such store file" in capsys.readouterr().err
