#!/usr/bin/env python3
"""Reads mixtape's TensorBoard event files back without TensorFlow or
TensorBoard: an independent TFRecord reader (its own bitwise CRC-32C) and a
minimal protobuf decoder for tensorflow.Event. Checks every record's two
CRCs, the file_version record, and that each step's train/loss and
train/lr equal the --log file's values (as float32).

Usage: tensorboard_events.py EVENTS_DIR METRICS_JSONL
Catches: an unmasked or wrong CRC, a wrong wire type or field number, a
float written as double, steps or values that do not match the run."""
import glob, json, struct, sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        blob = f.read()
    at = 0
    while at < len(blob):
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert length_crc == masked(header), f"length CRC wrong at byte {at}"
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        assert data_crc == masked(data), f"data CRC wrong at byte {at}"
        yield data
        at += 16 + length
    assert at == len(blob), "trailing bytes after the last record"


def varint(buf, at):
    value, shift = 0, 0
    while True:
        b = buf[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, at


def fields(buf):
    at = 0
    while at < len(buf):
        key, at = varint(buf, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(buf, at)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        elif wire == 2:
            n, at = varint(buf, at)
            value, at = buf[at:at + n], at + n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        yield number, wire, value


def main(directory, metrics):
    files = glob.glob(directory + "/events.out.tfevents.*")
    assert len(files) == 1, f"expected one event file, found {files}"
    scalars = {}
    first = True
    for data in records(files[0]):
        event = {n: (w, v) for n, w, v in fields(data)}
        assert event[1][0] == 1, "wall_time must be a double"
        if first:
            assert event[3] == (2, b"brain.Event:2"), "the first record must carry file_version"
            first = False
            continue
        assert event[2][0] == 0, "step must be a varint"
        step = event[2][1]
        for n, w, value in fields(event[5][1]):
            assert (n, w) == (1, 2), "Summary.value expected"
            v = {n2: (w2, v2) for n2, w2, v2 in fields(value)}
            assert v[2][0] == 5, "simple_value must be a float"
            scalars[(v[1][1].decode(), step)] = struct.unpack("<f", v[2][1])[0]
    checked = 0
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if "step" not in record or "loss" not in record or "eval" in record or "summary" in record:
                continue
            for key in ("loss", "lr"):
                want = struct.unpack("<f", struct.pack("<f", record[key]))[0]
                got = scalars[(f"train/{key}", record["step"])]
                assert got == want, f"step {record['step']} {key}: {got} in the events, {want} in the log"
                checked += 1
    assert checked >= 10, f"only {checked} values compared"
    tags = {tag for tag, _ in scalars}
    for tag in ("train/samples_per_s", "memory/parameters", "memory/activations", "memory/optimizer_state"):
        assert tag in tags, f"no {tag} scalars"
    print(f"{len(scalars)} scalars read back, {checked} compared with the log, every CRC correct")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
