"""Other processes on the job's GPUs: which polls judge a row's measurement, and when a process counts as
running kernels (runners/measure/neighbours.py); what a job without a watch records."""
import math
import threading
import time
from types import SimpleNamespace

from triton_sweep.measure.neighbours import BUSY_FOR_S, POLL_S, GpuWatch, Neighbour, Polls
from tests.conftest import run_sweep, sweep_rows

GPU = "GPU-0"
HOG = Neighbour(101, "python3", 874.0)
NOTEBOOK = Neighbour(202, "python3", 500.0)
WORKER = Neighbour(303, "python3", 700.0)  # the job's trial worker
OURS = {WORKER.pid}


def polls_of(active_at: dict[float, set], until_s: float = 4.0) -> Polls:
    """Polls of GPU every POLL_S from 0 s; at the times in active_at NVML gave those pids a sample of
    activity since the poll before, and the job's worker one at every poll. Both neighbours and the worker
    hold a context throughout; GPU-1 has none."""
    polls = Polls([GPU, "GPU-1"])
    for step in range(int(until_s / POLL_S) + 1):
        at = step * POLL_S
        polls.add(at, GPU, [HOG, NOTEBOOK, WORKER], active_at.get(at, set()) | OURS)
        polls.add(at, "GPU-1", [], set())
    return polls


def test_a_row_is_judged_by_the_polls_of_its_measurement_and_the_one_before_it():
    polls = polls_of({1.0: {HOG.pid}}, until_s=6.0)  # its one sample of activity: at the poll of 1.0 s
    assert polls.busy(GPU, 0.1, 0.3, OURS) == []  # before that sample
    assert polls.busy(GPU, 0.1, 0.8, OURS) == [HOG]  # the first poll after the end saw it
    assert polls.busy(GPU, 0.8, 1.1, OURS) == [HOG]  # inside
    assert polls.busy(GPU, 2.9, 2.95, OURS) == [HOG]  # between polls: the one before counts it BUSY_FOR_S on
    assert polls.busy(GPU, 1.0 + BUSY_FOR_S + POLL_S, 4.0, OURS) == []  # begun BUSY_FOR_S after its sample
    assert polls.busy("GPU-1", 0.8, 1.1, OURS) == []  # another GPU's polls
    assert polls.busy(GPU, 6.5, 6.6, OURS) == []  # after the newest poll: not seen yet


def test_a_process_nvml_gives_few_samples_counts_as_busy_between_them():
    """Two processes taking turns on a GPU: NVML gives each ~1/6 s sample to one of them, so a process that
    ran the whole time went without a sample for up to 0.77 s (an H100, a matmul loop beside short timed
    kernels: the polls below are that run's). Every row measured meanwhile is marked, not those between
    its samples alone."""
    samples = (0.25, 0.75, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.25, 3.5, 3.75)
    polls = polls_of({at: {HOG.pid} for at in samples})
    rows = [(start, start + 0.07) for start in (0.3 + 0.1 * i for i in range(35))]
    assert all(polls.busy(GPU, start, end, OURS) == [HOG] for start, end in rows)
    without_the_lag = [start for start, end in rows if not any(start - POLL_S <= at <= end + POLL_S
                                                               for at in samples)]
    assert without_the_lag  # a rule that read each poll's samples alone would have missed these rows


def test_a_process_that_only_holds_a_context_is_seen_and_marks_no_row():
    polls = polls_of({at: {HOG.pid} for at in (0.5, 0.75)})
    assert polls.seen(OURS) == [(GPU, HOG), (GPU, NOTEBOOK)]
    assert all(NOTEBOOK not in polls.busy(GPU, start, start + 0.1, OURS) for start in (0.0, 0.6, 2.0, 3.5))


def test_the_job_s_own_processes_are_told_when_asked_not_when_polled():
    """A worker started anew (after a crash) holds a context, and runs kernels, before the job's thread
    learns its pid: the polls keep it as any process, and the job's pids of the moment filter it out."""
    polls = polls_of({})
    assert polls.busy(GPU, 1.0, 1.1, set()) == [WORKER]  # before the job knows it
    assert polls.busy(GPU, 1.0, 1.1, OURS) == [] and (GPU, WORKER) not in polls.seen(OURS)


def test_no_poll_yet_marks_nothing():
    assert Polls([GPU]).busy(GPU, 0.0, 1.0, OURS) == []


def test_the_interpreter_s_rows_do_not_say_whether_they_shared_a_gpu(tmp_path):
    run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[4096]]", "kernel.dtypes=[float32]",
              "kernel.space.BLOCK_SIZE=[256,1024]", "kernel.space.num_warps=[4]", "sweep_id=nb")
    rows = sweep_rows(tmp_path, "nb")
    assert len(rows) and rows["gpu_shared"].isna().all() and rows["gpu_uuid"].isna().all()


class StandInNvml:
    """The NVML calls a GpuWatch makes, answered for one GPU where `processes` hold a context and all
    ran kernels lately; `hang_after` polls, the process list never returns (a GPU in trouble). A host
    without a GPU has no NVML: this stands in for it to test the watch's threads, not NVML."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    def __init__(self, processes: dict, hang_after: float = math.inf):
        self.processes, self.hang_after, self.polls = processes, hang_after, 0
        self.released = threading.Event()

    def nvmlInit(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return GPU

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self.polls += 1
        if self.polls > self.hang_after:
            self.released.wait()
        return [SimpleNamespace(pid=pid, usedGpuMemory=2 ** 30) for pid in self.processes]

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):
        return [SimpleNamespace(pid=pid, smUtil=90, memUtil=20) for pid in self.processes]

    def nvmlSystemGetProcessName(self, pid):
        return self.processes[pid]


def test_the_job_s_processes_are_asked_for_on_the_job_s_thread_alone():
    """The handles of forked workers read their server's pipe, which the job's thread reads too: asked
    from the polling thread, two threads read one pipe (the GPU tests once hung at a worker started anew
    after an illegal address). The thread polls; every question about the job's processes is the job's
    thread's."""
    callers = []

    def ours():
        callers.append(threading.current_thread())
        return {WORKER.pid}

    nvml = StandInNvml({WORKER.pid: "worker", HOG.pid: "hog"})
    watch = GpuWatch([GPU], ours, nvml).start()
    while nvml.polls < 4:  # the thread's polls
        time.sleep(POLL_S)
    shared = watch.row_shared(GPU, 0.01, "worker on GPU 0")
    watch.stop()
    assert shared is True and [n.pid for _, n in watch.polls.seen(watch.ours())] == [HOG.pid]
    assert callers and set(callers) == {threading.current_thread()}


def test_an_nvml_call_that_never_returns_leaves_the_job_not_waiting():
    nvml = StandInNvml({WORKER.pid: "worker"}, hang_after=2)
    watch = GpuWatch([GPU], lambda: {WORKER.pid}, nvml).start()
    stopper = threading.Thread(target=watch.stop)
    while nvml.polls <= 2:
        time.sleep(POLL_S)
    stopper.start()
    stopper.join(timeout=60)
    alive = stopper.is_alive()
    nvml.released.set()
    assert not alive
