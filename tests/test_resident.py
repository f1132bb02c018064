"""The resident (runners/engine/resident.py): a command leaves one behind, the next command is run by it
with the same rows, exit status and output, Ctrl-C reaches it, `stop` ends it; workers of a command it
runs are forked from the command's home server, interpreter workers spawned; and on a GPU, a sweep with
torch.compile baselines run by the resident, its GPU and side workers forked."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from runners.engine import resident
from tests.conftest import REPO, run_sweep, sweep_rows, wait_for_resident

SHAPES = ["kernel=softmax", "kernel.shapes=[[64,1000],[33,517]]", "kernel.dtypes=[float32]",
          "kernel.space.BLOCK_SIZE=[1024]", "kernel.space.num_warps=[1,4]", "kernel.baselines=[torch]"]


def test_a_command_leaves_a_resident_and_the_next_is_run_by_it(tmp_path, residents):
    first = run_sweep(tmp_path, *SHAPES, "sweep_id=first")
    assert "a resident (pid" in first.stderr and "run by the resident" not in first.stderr
    wait_for_resident(residents)
    second = run_sweep(tmp_path, *SHAPES, "sweep_id=second")
    assert "run by the resident" in second.stderr and "a resident (pid" not in second.stderr
    assert "run by the resident" not in second.stdout  # stdout is the command's own (Hydra's --cfg)
    before, after = sweep_rows(tmp_path, "first"), sweep_rows(tmp_path, "second")
    trials = ["provider", "shape", "dtype", "config", "status"]
    assert (before["status"] == "ok").all() and len(before) == 6
    assert sorted(map(tuple, before[trials].values)) == sorted(map(tuple, after[trials].values))
    # a bad input: the same message and exit status as without the resident, before any launch
    bad = run_sweep(tmp_path, *SHAPES, "kernel.dtypes=[float99]", check=False)
    assert bad.returncode == 2 and "kernel.dtypes" in bad.stderr and "run by the resident" in bad.stderr


LEAVE_TWICE = """
from runners.engine import resident
resident.leave_resident()
resident.leave_resident()
print("starting at once:", len(resident.starting()))
"""


def test_one_resident_a_key_and_starting_from_the_first_moment(residents):
    """Its lock is taken before the resident starts: a second command ending at once starts none, and a
    command coming next finds it starting (and waits) instead of running without it."""
    result = subprocess.run([sys.executable, "-c", LEAVE_TWICE], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert result.stderr.count("a resident (pid") == 1, result.stderr
    assert "starting at once: 1" in result.stdout
    wait_for_resident(residents)


def test_a_resident_is_keyed_by_the_environment_read_at_import(tmp_path, residents):
    """A command whose import-time environment differs is not run by the resident of another."""
    path = list(sys.path)
    base = {"PATH": "/bin", "TRITON_CACHE_DIR": "/a"}
    assert resident.key(base, path) == resident.key({**base, "TERM": "dumb"}, path)
    assert resident.key(base, path) != resident.key({**base, "TRITON_CACHE_DIR": "/b"}, path)
    assert resident.key(base, path) != resident.key({**base, "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}, path)
    assert resident.key(base, path) != resident.key(base, ["/elsewhere"] + path)


def test_ctrl_c_reaches_the_command_the_resident_runs(tmp_path, residents):
    """Ctrl-C ends the command as it ends Python; `stop` while a command runs removes the socket at once
    (the next command runs on its own) and the resident exits once that command has ended."""
    run_sweep(tmp_path, *SHAPES, "sweep_id=first")
    wait_for_resident(residents)
    # many slow trials: the interpreter runs each for 50 ms or more
    slow = run_sweep(tmp_path, "kernel=softmax", "kernel.shapes=[[64,1000],[64,2000],[64,3000],[64,4000]]",
                     "kernel.dtypes=[float32,float16]", "sweep_id=stopped", background=True)
    output = ""
    while "run by the resident" not in output:
        line = slow.stdout.readline()
        assert line, output
        output += line
    subprocess.run([sys.executable, "-m", "runners.engine.resident", "stop"], cwd=REPO, env=dict(os.environ))
    assert not list(residents.glob("*.sock")) and slow.poll() is None  # removed before `stop` ended
    time.sleep(3)  # into its trials
    slow.send_signal(signal.SIGINT)
    rest, _ = slow.communicate(timeout=120)
    assert slow.returncode == -signal.SIGINT, output + rest  # as Python's own end after Ctrl-C
    assert "KeyboardInterrupt" in rest
    deadline = time.monotonic() + 60  # its exit, torch and inductor imported, on a busy 2-core box
    while any(resident._held(lock) for lock in residents.glob("*.lock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(resident._held(lock) for lock in residents.glob("*.lock"))  # the resident has exited


def test_stop_ends_the_resident(tmp_path, residents):
    run_sweep(tmp_path, *SHAPES, "sweep_id=first")
    wait_for_resident(residents)
    stop = subprocess.run([sys.executable, "-m", "runners.engine.resident", "stop"], cwd=REPO,
                          capture_output=True, text=True, env=dict(os.environ))
    assert "asked to stop" in stop.stdout
    deadline = time.monotonic() + 30
    while list(residents.glob("*.sock")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(residents.glob("*.sock"))
    third = run_sweep(tmp_path, *SHAPES, "sweep_id=third", "force=true")
    assert "run by the resident" not in third.stderr and "a resident (pid" in third.stderr


def test_a_folder_others_may_write_is_refused(tmp_path, residents):
    """A socket there could be anyone's: the command runs in its own process and says why."""
    shutil.rmtree(residents)
    residents.mkdir(mode=0o700)
    residents.chmod(0o777)
    result = run_sweep(tmp_path, *SHAPES, "sweep_id=alone")
    assert f"note: no resident: {residents} is not a folder of this user's alone" in result.stderr
    assert "a resident (pid" not in result.stderr and not list(residents.iterdir())


def _report_parent(conn) -> None:
    """A worker's main (by name, in the child): says which process it was forked or spawned from."""
    conn.send(("ready", {"ppid": os.getppid()}))
    conn.recv()


HOME_SCRIPT = """
import os, sys
import torch  # as in a command the resident forked: imported before the home server forks
from runners.engine import process
home = process.start_home_server()
forked = process.WorkerProcess("forked", "tests.test_resident:_report_parent", ())
spawned = process.WorkerProcess("spawned", "tests.test_resident:_report_parent", (), interpret=True)
for worker in (forked, spawned):
    worker.start()
    info = worker.wait_ready()
    print(worker.name, info["ppid"] == home.process.pid, info["ppid"] == os.getpid())
process.stop_all([forked, spawned])
print("home alive after stop_all:", home.process.is_alive())
"""


def test_workers_of_a_command_are_forked_from_its_home_server():
    """GPU and compile workers come from the home server, with what it imported; interpreter workers are
    spawned (Triton reads TRITON_INTERPRET at import); stop_all leaves the home server to the command."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, "-c", HOME_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "forked True False" in lines, result.stdout
    assert "spawned False True" in lines, result.stdout
    assert "home alive after stop_all: True" in lines


ORPHAN_SCRIPT = """
import os
from runners.engine import process
print(process.start_home_server().process.pid, flush=True)
os._exit(0)  # as a command killed outright: nothing stops the home server but the end of its pipe
"""


def test_a_home_server_ends_with_its_command():
    from runners.engine.process import _pid_alive

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=120)
    home = int(result.stdout.split()[0])
    deadline = time.monotonic() + 30
    while _pid_alive(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pid_alive(home)


START_SCRIPT = """
from runners.engine import process, resident
resident.start_command("runners.sweep")
print("home server:", process._home is not None)
"""


@pytest.mark.parametrize("served, home", [(False, True), (True, False)])
def test_a_command_the_resident_runs_starts_no_home_server_of_its_own(served, home):
    """Run here, a command forks a home server as it starts; run by the resident, it has the one the
    resident's child forked for it (_run_command), and starts no second one."""
    env = {**os.environ, "PYTHONPATH": str(REPO), resident.IDLE_VARIABLE: "0"}
    env.pop("TRITON_INTERPRET", None)
    if served:
        env[resident.CHILD_VARIABLE] = "1"
    result = subprocess.run([sys.executable, "-c", START_SCRIPT], cwd=REPO, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"home server: {home}" in result.stdout.splitlines(), result.stdout


def test_only_the_checkouts_own_modules_are_imported_again():
    import omegaconf

    from runners.engine import trial

    assert resident._is_project_module(trial)
    assert not resident._is_project_module(omegaconf) and not resident._is_project_module(torch)


@pytest.mark.gpu
def test_a_gpu_sweep_run_by_the_resident(tmp_path, residents):
    """Trial workers and the torch.compile baselines' worker forked from the home server measure on the
    GPU as spawned ones do: every trial ok, the same trials."""
    overrides = ["kernel=softmax", "kernel.shapes=[[1823,781],[4096,1024]]", "kernel.dtypes=[float16]",
                 "kernel.space.BLOCK_SIZE=[1024,2048]", "kernel.space.num_warps=[4,8]",
                 "kernel.baselines=[torch,compile]", "finalists.top_k=2"]
    run_sweep(tmp_path, *overrides, "sweep_id=spawned", backend="cuda")
    wait_for_resident(residents)
    served = run_sweep(tmp_path, *overrides, "sweep_id=forked", "force=true", backend="cuda")
    assert "run by the resident" in served.stderr
    spawned, forked = sweep_rows(tmp_path, "spawned"), sweep_rows(tmp_path, "forked")
    assert (forked["status"] == "ok").all(), forked[["provider", "status", "message"]]
    trials = ["provider", "shape", "dtype", "config", "phase"]
    screened = lambda rows: sorted(map(tuple, rows[rows["phase"] == "screen"][trials].values))
    assert screened(spawned) == screened(forked)
    assert set(forked[forked["provider"] == "compile"]["phase"]) == {"screen", "final"}
