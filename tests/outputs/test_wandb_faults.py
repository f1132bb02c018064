"""W&B faults. On real sweeps (interpreter), with a run per trial and with the sweep's run alone: wandb
failing to import, and wandb.init failing in every run; each leaves the store, the parquet file, the
plots and the exit status as they are without W&B and says so in one warning line naming the cause. In
this process, with the real wandb: an unwritable logger.dir and online runs that cannot be created, each
one warning line, trial runs and summary together. Online with the real wandb and a server out of reach
(refused, or silent): the runs go offline after one bounded wait, named with their `wandb sync`."""

import os
import socket
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest

from triton_sweep.outputs.wandb import logger as wandb_logger
from triton_sweep.outputs.wandb.summary import log_sweep_summary
from triton_sweep.store.result_store import ResultStore
from tests.conftest import run_sweep, sweep_rows, user_env

SMALL = [
    "kernel=softmax",
    "kernel.shapes=[[5,100]]",
    "kernel.dtypes=[float16]",
    "kernel.space.BLOCK_SIZE=[128]",
    "kernel.space.num_warps=[2,4]",
    "kernel.space.num_stages=[1]",
    "kernel.baselines=[torch]",
    "sweep_id=faults",
]
# A wandb whose install is incomplete: its import fails inside the package (seen on a GPU host).
BROKEN_IMPORT = (
    "raise ImportError(\"cannot import name 'Settings' from partially initialized module 'wandb'\")\n"
)
# A wandb that imports, and whose every run fails to start (its service, credentials, the server).
BROKEN_INIT = """class Settings(dict):
    def __init__(self, **kwargs):
        super().__init__(kwargs)


def init(**kwargs):
    raise RuntimeError("fake: the wandb service did not start\\nand a second line that must not be printed")
"""


def _fake_wandb(tmp_path, source: str, monkeypatch) -> None:
    package = tmp_path / "fake" / "wandb"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))  # run_sweep puts the tests before it


def _assert_results_untouched(tmp_path, result, *causes: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Traceback" not in output
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1, warnings
    assert all(cause in warnings[0] for cause in causes), warnings[0]
    assert "not affected" in warnings[0] and "wandb sync" not in output
    store = ResultStore(tmp_path / "results.sqlite")
    frame = store.load(sweep_id="faults")
    store.close()
    assert len(frame) == 3 and set(frame["status"]) == {"ok"}  # 2 configs and the baseline
    assert len(pd.read_parquet(tmp_path / "run" / "results.parquet")) == 3
    assert "export skipped: refusing to export 'softmax': its ok trials are interpreter timings" in output
    for name in ("roofline.png", "speedup_softmax.png"):  # one meta-parameter varies: no heatmap
        assert (tmp_path / "run" / name).stat().st_size > 0


@pytest.mark.parametrize("runs", ["trial", "sweep"])
def test_wandb_that_fails_to_import(tmp_path, monkeypatch, runs):
    _fake_wandb(tmp_path, BROKEN_IMPORT, monkeypatch)
    result = run_sweep(tmp_path, *SMALL, "logger.mode=offline", f"logger.runs={runs}", check=False,
                       plots=True)
    _assert_results_untouched(
        tmp_path, result, "W&B logging is off", "wandb cannot be imported (ImportError: cannot"
    )
    assert not (tmp_path / "wandb").exists()


def test_wandb_whose_runs_fail_to_start(tmp_path, monkeypatch):
    _fake_wandb(tmp_path, BROKEN_INIT, monkeypatch)
    result = run_sweep(tmp_path, *SMALL, "logger.mode=offline", check=False, plots=True)
    _assert_results_untouched(
        tmp_path,
        result,
        "3 of 3 trial runs not written",
        "(RuntimeError: fake: the wandb service did not start)",
        "the summary run is skipped",
    )


def test_wandb_whose_sweep_run_fails_to_start(tmp_path, monkeypatch):
    """logger.runs=sweep: the one run the sweep makes fails to start."""
    _fake_wandb(tmp_path, BROKEN_INIT, monkeypatch)
    result = run_sweep(tmp_path, *SMALL, "logger.mode=offline", "logger.runs=sweep", check=False, plots=True)
    _assert_results_untouched(
        tmp_path,
        result,
        "W&B: the run of sweep faults was not written",
        "(RuntimeError: fake: the wandb service did not start)",
    )


@pytest.fixture
def fresh_logger_state(monkeypatch):
    """What this process remembers of W&B problems and warnings, emptied for the test."""
    monkeypatch.setattr(wandb_logger, "_problems", {})
    monkeypatch.setattr(wandb_logger, "_warned", set())


def test_the_import_check_tries_again_where_its_interpreter_did_not_start(monkeypatch):
    # The spawn of `python -c "import wandb"` failing (a vfork beside the sweep's forks: EFAULT) says
    # nothing of wandb: tried again, and the import's own failure is what is reported.
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    failures = {"left": 1}
    spawns = []

    def run(args, **kwargs):
        spawns.append(args)
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(14, "Bad address")
        return subprocess.CompletedProcess(args, 1, "", "Traceback ...\nImportError: no wandb here\n")

    monkeypatch.setattr(wandb_logger.subprocess, "run", run)
    assert wandb_logger._import_problem() == "ImportError: no wandb here" and len(spawns) == 2
    spawns.clear()
    failures["left"] = wandb_logger.SPAWN_ATTEMPTS  # it never starts: nothing is known against wandb
    assert wandb_logger._import_problem() is None and len(spawns) == wandb_logger.SPAWN_ATTEMPTS


def _log_a_sweep(conf: dict) -> None:
    """What a sweep does with W&B: three trial runs, then the summary run."""
    frame = pd.DataFrame(
        {
            "status": ["ok"],
            "p50_us": [1.0],
            "kernel": ["k"],
            "dtype": ["float16"],
            "shape": ["[4]"],
            "config": ['{"BLOCK_SIZE": 4}'],
            "samples_us": [None],
        }
    )
    logger = wandb_logger.TrialLogger(conf, "faults")
    for i in range(3):
        logger.log(
            "k", f"trial {i}", {"kernel": "k", "shape": [4], "BLOCK_SIZE": 4}, {"status": "ok", "p50_us": 1.0}
        )
    logger.close()
    log_sweep_summary(conf, "faults", frame, [])


def test_an_unwritable_wandb_dir(tmp_path, capfd, fresh_logger_state):
    (tmp_path / "a_file").write_text("not a directory")
    _log_a_sweep({"mode": "offline", "project": "p", "entity": None, "dir": str(tmp_path / "a_file")})
    captured = capfd.readouterr()  # the logging processes too
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: W&B logging is off for this sweep: logger.dir: ")
    assert f"{tmp_path}/a_file/wandb is not writable (" in lines[0]


def test_online_runs_that_cannot_be_created(tmp_path, capfd, monkeypatch, fresh_logger_state):
    # No API key, and a server address on this machine where nothing listens: nothing leaves the host.
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    _log_a_sweep({"mode": "online", "project": "p", "entity": None, "dir": str(tmp_path)})
    captured = capfd.readouterr()  # the logging processes too
    lines = (captured.out + captured.err).splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "warning: W&B: 3 of 3 trial runs not written (UsageError: "
    )
    assert "the summary run is skipped" in lines[0]


def test_a_run_that_cannot_be_sent_is_counted(tmp_path, capfd, fresh_logger_state):
    """A run whose values do not pickle is not sent to its logging process: counted, named, and the
    runs after it are written."""
    conf = {"mode": "offline", "project": "p", "entity": None, "dir": str(tmp_path)}
    logger = wandb_logger.TrialLogger(conf, "faults")
    logger.log("k", "unpicklable", {"kernel": "k", "shape": [4], "hook": lambda: None}, {"status": "ok"})
    for i in range(3):
        logger.log("k", f"trial {i}", {"kernel": "k", "shape": [4], "BLOCK_SIZE": 4}, {"status": "ok"})
    logger.close()
    captured = capfd.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if line.startswith("warning")]
    assert len(lines) == 1 and lines[0].startswith("warning: W&B: 1 of 4 trial runs not written (")
    assert "pickle" in lines[0].lower()
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 3


def test_the_wandb_check_runs_while_the_workers_start(monkeypatch, capfd, fresh_logger_state):
    """The W&B output's `begin` (made at the job's start, before its input is validated and its workers
    start) returns before W&B has been checked (wandb's import: 0.5-0.8 s); its `start`, before the
    first trial, waits for the finding and says it."""
    import threading

    from omegaconf import OmegaConf

    from triton_sweep.outputs.wandb import Wandb

    release, asked = threading.Event(), []

    def slow_problem(conf: dict):  # remembered per config, as the real one
        key = (conf["mode"], conf["dir"])
        if key not in wandb_logger._problems:
            asked.append(conf["dir"])
            release.wait(timeout=30)
            wandb_logger._problems[key] = "wandb cannot be imported (held here)"
        return wandb_logger._problems[key]

    monkeypatch.setattr(wandb_logger, "wandb_problem", slow_problem)
    output = Wandb({"mode": "offline", "project": "p", "entity": None, "dir": "somewhere", "runs": "trial",
                    "auto_trials": 64})
    output.begin(None)
    assert not release.is_set() and output._checking.is_alive()  # begin returned; W&B is still checked
    threading.Timer(0.2, release.set).start()
    output.start(OmegaConf.create({"timing": {}}), "s", ())
    assert release.is_set() and asked == ["somewhere"] and not output._checking.is_alive()
    assert output.trials is None or not output.trials.enabled  # the finding holds: no trial runs
    assert capfd.readouterr().out.count("W&B logging is off for this sweep: wandb cannot be imported") == 1


def test_the_check_imports_wandb_in_an_interpreter_of_its_own(tmp_path):
    """The sweep's process writes no W&B run: its check tries wandb's import in another interpreter and
    never imports it itself (0.5-0.8 s of its GIL before the first trial); a broken install is named."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from triton_sweep.outputs.wandb import logger as w; "
            f"print(w.wandb_problem({{'mode': 'offline', 'dir': {str(tmp_path)!r}}}), "
            "'wandb' in sys.modules)")
    repo = Path(__file__).resolve().parents[2]
    fine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, check=True,
                          timeout=120)
    assert fine.stdout.split() == ["None", "False"]
    broken = tmp_path / "fake" / "wandb"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(BROKEN_IMPORT)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{repo}"}
    failed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo,
                            env=env, check=True, timeout=120)
    assert failed.stdout.startswith("wandb cannot be imported (ImportError: cannot import name 'Settings'")
    assert failed.stdout.split()[-1] == "False"


UNREACHABLE = ["kernel=vector_add", "kernel.shapes=[[1000]]", "kernel.space.BLOCK_SIZE=[256,512]",
               "sweep_id=unreachable"]


@pytest.fixture(scope="module")
def without_wandb(tmp_path_factory):
    """The same sweep with logger.mode=disabled: its rows and its seconds."""
    work = tmp_path_factory.mktemp("disabled")
    began = time.perf_counter()
    run_sweep(work, *UNREACHABLE)
    return sweep_rows(work, "unreachable"), time.perf_counter() - began


@pytest.fixture
def server(request):
    """A W&B address on this machine where nothing listens (refused), or where a listener accepts every
    connection, holds it and never sends a byte (silent)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if request.param == "refused":
        listener.close()  # the port is free again: connections to it are refused
        yield f"http://127.0.0.1:{port}"
        return
    listener.listen(64)
    held = []

    def hold():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:  # closed at the end of the test
                return

    threading.Thread(target=hold, daemon=True).start()
    yield f"http://127.0.0.1:{port}"
    listener.close()
    for connection in held:
        connection.close()


@pytest.mark.parametrize("server, runs", [("refused", "sweep"), ("silent", "auto")], indirect=["server"])
def test_an_unreachable_server_sends_the_runs_offline(tmp_path, without_wandb, server, runs, request):
    """logger.mode=online, the server out of reach: the sweep's results as without W&B, every run (a run
    per trial and the sweep's, or the sweep's alone) written offline after one bounded wait (wandb's
    init_timeout), and one warning line naming the `wandb sync` that uploads them."""
    env = user_env(WANDB_BASE_URL=server, WANDB_API_KEY="0" * 40)  # a key of the right form, never sent
    began = time.perf_counter()
    result = run_sweep(tmp_path, *UNREACHABLE, "logger.mode=online", f"logger.runs={runs}", check=False,
                       env=env)
    seconds = time.perf_counter() - began
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Traceback" not in output, output
    warnings = [line for line in output.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1 and output.count("wandb sync") == 1, warnings
    assert warnings[0].startswith("warning: W&B: the server was unreachable (CommError: ")
    sync = f"written offline instead; upload later with: wandb sync {tmp_path}/wandb/offline-run-*;"
    assert sync in warnings[0]
    assert warnings[0].endswith("not affected")
    rows, disabled_s = without_wandb
    frame = sweep_rows(tmp_path, "unreachable")
    # 6 configs and the torch baseline (on the interpreter, kernel.baselines=null leaves torch.compile out)
    assert len(frame) == len(rows) == 7 and set(frame["status"]) == set(rows["status"]) == {"ok"}
    assert len(pd.read_parquet(tmp_path / "run" / "results.parquet")) == len(frame)
    trial_runs = len(frame) if runs == "auto" else 0  # auto: 7 trials, at most logger.auto_trials
    if trial_runs:
        assert f"{trial_runs} of {trial_runs} trial runs and the sweep's run are written" in warnings[0]
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == trial_runs + 1
    # No timing threshold beyond a generous one: wandb's default init_timeout alone is 90 s a logging
    # process (the loss this bounds); with INIT_TIMEOUT_S and FINISH_TIMEOUT_S it is 5-10 s on 2 cores.
    extra = seconds - disabled_s
    case = request.node.callspec.params["server"]
    print(f"{case} ({runs}): {seconds:.1f} s online, {disabled_s:.1f} s disabled: {extra:.1f} s to W&B")
    assert extra < 60


REFUSED = "Timed out while retrying: connect: connection refused"


@pytest.mark.parametrize("fault", ["init", "upload"])
def test_a_logging_process_goes_offline_at_the_first_fault(tmp_path, monkeypatch, fresh_logger_state, fault):
    """A logging process whose first online run finds the server out of reach, its init failing to
    connect (CommError) or its upload not finished within finish_timeout (TimeoutError from finish),
    writes that run and the later ones offline without asking the server again, and says so in its
    answer: why, how many went offline, which run is left to sync."""
    import wandb

    modes = []

    class Run:
        settings = type("Settings", (), {"sync_dir": str(tmp_path / "wandb" / "run-1")})()
        summary: dict = {}

        def __init__(self, mode):
            self.mode = mode

        def define_metric(self, *args, **kwargs):
            pass

        def finish(self):
            if self.mode == "online":
                raise TimeoutError("Timed out finishing run.")

    def start_run(conf, sweep_id, job_type, name, config, trial, mode):
        modes.append(mode)
        if mode == "online" and fault == "init":
            raise wandb.errors.CommError(REFUSED)
        return Run(mode)

    class Conn:
        items = [("k", f"trial {i}", {}, {"status": "ok"}) for i in range(3)] + [None]
        answer = None

        def recv(self):
            return self.items.pop(0)

        def send(self, answer):
            self.answer = answer

    monkeypatch.setattr(wandb_logger, "_start_run", start_run)
    conn, conf = Conn(), {"mode": "online", "project": "p", "entity": None, "dir": str(tmp_path)}
    wandb_logger._log_trials(conn, conf, "s")
    failed, cause, stopped, why, offline, unsynced = conn.answer
    assert (failed, cause, stopped) == (0, None, False)
    if fault == "init":
        assert modes == ["online", "offline", "offline", "offline"] and (offline, unsynced) == (3, [])
        assert why == f"the server was unreachable (CommError: {REFUSED})"
    else:
        assert modes == ["online", "offline", "offline"]
        assert (offline, unsynced) == (2, [Run.settings.sync_dir])
        assert why == f"an upload did not finish within {wandb_logger.FINISH_TIMEOUT_S:g} s"
