"""Other processes on the job's GPUs: which polls judge a row's measurement, and when a process counts as
running kernels (runners/measure/neighbours.py); what a job without a watch records."""
from runners.measure.neighbours import BUSY_FOR_S, POLL_S, Neighbour, Polls
from tests.conftest import run_sweep, sweep_rows

GPU = "GPU-0"
HOG = Neighbour(101, "python3", 874.0)
NOTEBOOK = Neighbour(202, "python3", 500.0)


def polls_of(active_at: dict[float, set], until_s: float = 4.0) -> Polls:
    """Polls of GPU every POLL_S from 0 s; at the times in active_at NVML gave those pids a sample of
    activity since the poll before. Both neighbours hold a context throughout; GPU-1 has none."""
    polls = Polls([GPU, "GPU-1"])
    for step in range(int(until_s / POLL_S) + 1):
        at = step * POLL_S
        polls.add(at, GPU, [HOG, NOTEBOOK], active_at.get(at, set()))
        polls.add(at, "GPU-1", [], set())
    return polls


def test_a_row_is_judged_by_the_polls_of_its_measurement_and_the_one_before_it():
    polls = polls_of({1.0: {HOG.pid}}, until_s=6.0)  # its one sample of activity: at the poll of 1.0 s
    assert polls.busy(GPU, 0.1, 0.3) == []  # before that sample
    assert polls.busy(GPU, 0.1, 0.8) == [HOG]  # the first poll after the end saw it
    assert polls.busy(GPU, 0.8, 1.1) == [HOG]  # inside
    assert polls.busy(GPU, 2.9, 2.95) == [HOG]  # between polls: the one before counts it BUSY_FOR_S on
    assert polls.busy(GPU, 1.0 + BUSY_FOR_S + POLL_S, 4.0) == []  # BUSY_FOR_S after its sample, before this
    assert polls.busy("GPU-1", 0.8, 1.1) == []  # another GPU's polls
    assert polls.busy(GPU, 6.5, 6.6) == []  # after the newest poll: not seen yet


def test_a_process_nvml_gives_few_samples_counts_as_busy_between_them():
    """Two processes taking turns on a GPU: NVML gives each ~1/6 s sample to one of them, so a process that
    ran the whole time went without a sample for up to 0.77 s (an H100, a matmul loop beside short timed
    kernels: the polls below are that run's). Every row measured meanwhile is marked, not those between
    its samples alone."""
    samples = (0.25, 0.75, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.25, 3.5, 3.75)
    polls = polls_of({at: {HOG.pid} for at in samples})
    rows = [(start, start + 0.07) for start in (0.3 + 0.1 * i for i in range(35))]
    assert all(polls.busy(GPU, start, end) == [HOG] for start, end in rows)
    without_the_lag = [start for start, end in rows if not any(start - POLL_S <= at <= end + POLL_S
                                                               for at in samples)]
    assert without_the_lag  # a rule that read each poll's samples alone would have missed these rows


def test_a_process_that_only_holds_a_context_is_seen_and_marks_no_row():
    polls = polls_of({at: {HOG.pid} for at in (0.5, 0.75)})
    assert polls.seen() == [(GPU, HOG), (GPU, NOTEBOOK)]
    assert all(NOTEBOOK not in polls.busy(GPU, start, start + 0.1) for start in (0.0, 0.6, 2.0, 3.5))


def test_no_poll_yet_marks_nothing():
    assert Polls([GPU]).busy(GPU, 0.0, 1.0) == []


def test_the_interpreter_s_rows_do_not_say_whether_they_shared_a_gpu(tmp_path):
    run_sweep(tmp_path, "kernel=vector_add", "kernel.shapes=[[4096]]", "kernel.dtypes=[float32]",
              "kernel.space.BLOCK_SIZE=[256,1024]", "kernel.space.num_warps=[4]", "sweep_id=nb")
    rows = sweep_rows(tmp_path, "nb")
    assert len(rows) and rows["gpu_shared"].isna().all() and rows["gpu_uuid"].isna().all()
