"""Read the records of a W&B offline run file (run-*.wandb), which wandb 0.31 ships no reader for.

The file is a 7-byte header (":W&B", a 2-byte magic, a version byte) followed by a LevelDB-style log:
32 KiB blocks of chunks, each with a 7-byte header (crc32 4, little-endian length 2, type 1), type
1 = a whole record, 2/3/4 = first/middle/last piece of one; each record is a protobuf `Record`.
A finished run's file ends with its exit record. wandb's service writes the file and closes it after
run.finish() has returned (seen: a file read at once held no record, or 4096 of its 21,749 bytes): the
logger waits for that before it says a run is written (wandb_logger._close_run_files), and a file
without its exit record is refused here.
"""
import struct

from wandb.proto import wandb_internal_pb2

BLOCK_BYTES = 32 * 1024
CHUNK_HEADER_BYTES = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path) -> list:
    """The records of a finished run's file; ValueError where the file does not end with the exit
    record (a run cut off, or a file still being written)."""
    records = list(_records(path))
    if not records or records[-1].WhichOneof("record_type") != "exit":
        raise ValueError(f"{path} does not end with the run's exit record ({len(records)} records): "
                         "its run did not finish, or wandb's service has not closed it yet")
    return records


def _records(path):
    data = open(path, "rb").read()
    if data[:4] != b":W&B":
        raise ValueError(f"{path} is not a W&B run file")
    position, pending = 7, b""
    while position + CHUNK_HEADER_BYTES <= len(data):
        left_in_block = BLOCK_BYTES - position % BLOCK_BYTES
        if left_in_block < CHUNK_HEADER_BYTES:  # the writer pads a block's tail with zeros
            position += left_in_block
            continue
        length, kind = struct.unpack("<HB", data[position + 4:position + 7])
        chunk = data[position + 7:position + 7 + length]
        position += CHUNK_HEADER_BYTES + length
        if kind == FULL:
            pending = chunk
        elif kind in (FIRST, MIDDLE):
            pending = (pending if kind == MIDDLE else b"") + chunk
            continue
        elif kind == LAST:
            pending += chunk
        else:
            continue  # padding
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        yield record


def _key(item) -> str:
    """A flat key, or a nested one joined with '/' (how wandb stores values inside a logged object)."""
    return item.key or "/".join(item.nested_key)


def read_run(path) -> dict:
    """{"group", "job_type", "name", "config": {...}, "summary": {...}, "files": [...]} of one run file."""
    import json

    run = {"config": {}, "summary": {}, "files": []}
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(group=record.run.run_group, job_type=record.run.job_type, name=record.run.display_name)
            run["config"].update({_key(item): json.loads(item.value_json)
                                  for item in record.run.config.update})
        elif kind == "config":
            run["config"].update({_key(item): json.loads(item.value_json) for item in record.config.update})
        elif kind == "summary":
            run["summary"].update({_key(item): json.loads(item.value_json) for item in record.summary.update})
        elif kind == "files":
            run["files"] += [item.path for item in record.files.files]
    return run
