"""The background finish (finish_in_background=true): the outputs marked `background` (the plots, the W&B
summary run) written after the sweep's command has returned, by `python -m triton_sweep.outputs.finisher FILE`
in a session of its own, FILE the JSON the sweep wrote beside them (finish.json: the store, the sweep,
the files written so far, each output's target, settings and handover). What it prints goes to
finish.log in the sweep's run directory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from triton_sweep.model.files import write_atomic
from triton_sweep.outputs.output import Finished, made, target


def start(done: Finished, outputs: list) -> int:
    """Start the process that writes `outputs` for the sweep `done` describes; returns its pid."""
    spec = done.output_dir / "finish.json"
    write_atomic(spec, json.dumps({
        "store": done.store, "sweep_id": done.sweep_id, "out_dir": str(done.output_dir),
        "files": {name: [str(p) for p in paths] for name, paths in done.files.items()},
        "outputs": [{"name": o.name, "target": target(o), "settings": o.settings, "handover": o.handover()}
                    for o in outputs]}))
    log_path = done.output_dir / "finish.log"
    if log_path.is_symlink():  # a link planted there is replaced, never written through
        log_path.unlink()
    with open(log_path, "ab", opener=lambda name, flags: os.open(name, flags | os.O_NOFOLLOW, 0o666)) as log:
        process = subprocess.Popen([sys.executable, "-m", "triton_sweep.outputs.finisher", str(spec)],
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # out of reach of a Ctrl-C meant for the sweep
    return process.pid


def main(argv=None) -> int:
    from triton_sweep.store.result_store import ResultStore

    job = json.loads(Path((argv or sys.argv[1:])[0]).read_text())
    store = ResultStore(job["store"])
    rows = store.load(sweep_id=job["sweep_id"])
    store.close()
    done = Finished(None, job["sweep_id"], Path(job["out_dir"]), job["store"], rows,
                    {name: [Path(p) for p in paths] for name, paths in job["files"].items()})
    for item in job["outputs"]:
        paths = made(item["target"], item["name"], item["settings"]).write(done, item["handover"])
        done.files[item["name"]] = paths
        print(f"{item['name']}: {', '.join(str(p) for p in paths) or 'written'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
