"""Data files: which files count, the processes' open and mapped files, residency and eviction (``mincore``)."""

from __future__ import annotations

import builtins
import io
import json
import mmap
import os
import sys
from pathlib import Path

import pytest

from dataprof.measure.footprint import DataFiles, dataset_directory, footprint, walk_size
from dataprof.measure.storage import (
    OpenLog,
    evict,
    excluded_roots,
    filesystem_of,
    held_paths,
    is_data_file,
    resident_bytes,
)

MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
nfs:/export /mnt/data nfs4 rw 0 0
tmpfs /mnt/data/scratch tmpfs rw 0 0
"""


def _write(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def _evictable(path: Path) -> bool:
    return filesystem_of(str(path)) not in ("tmpfs", "ramfs", None)


def test_data_files_leave_out_code_libraries_and_dataprofs_own(tmp_path: Path) -> None:
    roots = excluded_roots()
    data = _write(tmp_path / "shard-000.tar", 10)
    code = _write(tmp_path / "transforms.py", 10)
    own = tmp_path / "dataprof-opens-x"
    own.mkdir()
    log = _write(own / "123.opens", 10)
    assert is_data_file(str(data), roots)
    assert not is_data_file(str(code), roots)
    assert not is_data_file(str(log), roots)
    assert not is_data_file(os.__file__, roots)  # the standard library, under sys.base_prefix
    assert not is_data_file(str(tmp_path), roots)  # a directory
    assert not is_data_file(str(tmp_path / "gone.npy"), roots)
    assert not is_data_file("pipe:[1234]", roots)


def test_the_filesystem_is_the_longest_mount_above_the_path() -> None:
    assert filesystem_of("/mnt/data/train/0001.jpg", MOUNTS) == "nfs4"
    assert filesystem_of("/mnt/data/scratch/a.npy", MOUNTS) == "tmpfs"
    assert filesystem_of("/mnt/database/a.npy", MOUNTS) == "ext4"  # a prefix of the name is not a parent


def test_a_process_s_open_and_mapped_files_are_found(tmp_path: Path) -> None:
    held = _write(tmp_path / "open.bin", 4096)
    mapped = _write(tmp_path / "mapped.bin", 4096)
    with open(held, "rb"), open(mapped, "rb") as handle:
        view = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            assert str(held) in held_paths([os.getpid()], maps=False)
            found = held_paths([os.getpid()], maps=True)
        finally:
            view.close()
    assert {str(held), str(mapped)} <= found
    files = DataFiles()
    assert files.add(found) >= {str(held), str(mapped)}
    assert not any(path.startswith(sys.base_prefix) for path in files.sizes)  # libraries are mapped too


def test_the_open_log_keeps_each_path_with_its_time(tmp_path: Path) -> None:
    log = OpenLog(str(tmp_path))
    log.note(tmp_path / "a.npy")
    log.note(b"relative.npy")
    log.flush()
    opened = OpenLog.read(str(tmp_path))
    assert [path for _, path in opened] == [str(tmp_path / "a.npy"), os.path.abspath("relative.npy")]
    assert opened[0][0] <= opened[1][0]


def test_eviction_drops_the_files_read_and_leaves_the_others_resident(tmp_path: Path) -> None:
    if not _evictable(tmp_path):
        pytest.skip(f"{tmp_path} is on {filesystem_of(str(tmp_path))}: eviction has no effect there")
    files = [_write(tmp_path / f"{i}.npy", 256 * 1024) for i in range(6)]
    for path in files:
        path.read_bytes()
    read, unread = [str(p) for p in files[:3]], [str(p) for p in files[3:]]
    assert all(resident_bytes(p) == (256 * 1024, 256 * 1024) for p in read + unread)
    done = evict(read)
    assert (done.files, done.bytes, done.effective) == (3, 3 * 256 * 1024, True)
    assert [resident_bytes(p) for p in read] == [(0, 256 * 1024)] * 3
    assert [resident_bytes(p) for p in unread] == [(256 * 1024, 256 * 1024)] * 3  # never evicted


def test_a_file_that_vanished_is_skipped_with_its_reason(tmp_path: Path) -> None:
    here = _write(tmp_path / "here.npy", 4096)
    done = evict([str(here), str(tmp_path / "gone.npy")])
    assert done.files == 1
    assert len(done.skipped) == 1 and "gone.npy" in done.skipped[0]


def test_eviction_on_tmpfs_is_seen_to_have_no_effect() -> None:
    shm = Path("/dev/shm")
    if filesystem_of(str(shm)) != "tmpfs" or not os.access(shm, os.W_OK):
        pytest.skip("no writable tmpfs at /dev/shm")
    path = _write(shm / f"dataprof-test-{os.getpid()}.bin", 64 * 1024)
    try:
        done = evict([str(path)])
        assert done.effective is False
    finally:
        path.unlink()


def test_the_dataset_is_its_directory_s_files_of_the_kinds_read(tmp_path: Path) -> None:
    for klass in ("cat", "dog"):
        (tmp_path / klass).mkdir()
        for i in range(3):
            _write(tmp_path / klass / f"{i}.jpg", 1000)
    _write(tmp_path / "README.txt", 50_000)
    read = [str(tmp_path / "cat" / "0.jpg"), str(tmp_path / "dog" / "1.jpg")]
    assert dataset_directory(read) == str(tmp_path)
    assert walk_size(str(tmp_path), {".jpg"}) == (6000, 6, False)
    files = DataFiles()
    files.add(read)
    found = footprint(files, page_cache_bytes=10_000)
    assert found is not None
    assert (found.bytes, found.files, found.read_files, found.read_bytes) == (6000, 6, 2, 2000)
    assert found.fits_in_page_cache and found.directory == str(tmp_path)
    assert footprint(DataFiles(), 10_000) is None


def test_a_watch_reports_storage_reads_over_time_and_its_data_files_residency(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from dataprof.measure.probes import TreeSample
    from dataprof.measure.sampler import Samples
    from dataprof.measure.watch.watcher import storage_of

    data = _write(tmp_path / "train.bin", 8192)
    data.read_bytes()

    def reading(t: float, read: int) -> TreeSample:
        return TreeSample(t=t, cpu_s=0.0, main_cpu_s=None, main_thread_cpu_s=None, pss_bytes=None,
                          main_uss_bytes=None, workers_uss_bytes=None, processes=1, read_bytes=read)

    # epoch 1 reads 100 MB/s from storage, epoch 2 nothing: it went warm
    samples = Samples(tree=[reading(t, int(min(t, 2.0) * 100e6)) for t in (0.0, 1.0, 2.0, 3.0, 4.0)])
    sampler = SimpleNamespace(samples=samples, tree_probe=SimpleNamespace(held={str(data), os.__file__}))
    figures = storage_of(sampler)  # type: ignore[arg-type]
    assert figures["storage_timeline"] == (100e6, 100e6, 0, 0)
    assert (figures["data_files"], figures["data_bytes"]) == (1, 8192)
    if _evictable(tmp_path):
        assert figures["data_resident_fraction"] == 1.0


def test_inspect_reads_samples_as_found_then_cold_then_warm(tmp_path: Path) -> None:
    import dataprof
    from tests.conftest import ROOT

    if not _evictable(tmp_path):
        pytest.skip(f"{tmp_path} is on {filesystem_of(str(tmp_path))}: no cold pass there")
    inspection = dataprof.inspect(f"{ROOT}/examples/files.py:NpyFiles",
                                  args={"root": str(tmp_path), "count": 128, "kib": 64}, samples=40, batch_size=8)
    reads = inspection.storage
    assert reads is not None and reads.first is not None and reads.cold is not None and reads.warm is not None
    size = 64 * 1024
    assert reads.cold.samples == reads.warm.samples == 40
    assert 0.9 * size <= (reads.cold.read_bytes_per_sample or 0) <= 1.2 * size  # a file a sample, from storage
    assert (reads.warm.read_bytes_per_sample or 0) < 0.1 * size  # the same samples again: cached
    assert reads.cold.files_per_sample == reads.warm.files_per_sample == 1.0
    assert reads.footprint is not None and reads.footprint.files == 128
    assert builtins.open is io.open and "logged" not in builtins.open.__name__  # the openers were put back
    assert inspection.to_dict()["storage"]["cold"]["samples"] == 40


def test_the_run_report_draws_storage_reads_and_residency() -> None:
    from rich.console import Console

    from dataprof.render.run import storage_line
    from dataprof.results.run import RunReport

    data = json.loads((Path(__file__).resolve().parent.parent / "data" / "run" / "train_w2.json").read_text())
    data["resources"].update(storage_read_bytes_per_s=50e6, storage_timeline=[100e6, 100e6, 0, 0],
                             data_files=3, data_bytes=3e9, data_resident_fraction=1.0)
    report = RunReport.from_dict(data)
    assert report.resources.storage_timeline == (100e6, 100e6, 0, 0)
    line = storage_line(report)
    assert line is not None
    console = Console(width=200, record=True)
    console.print(line)
    text = console.export_text()
    assert "storage reads 50.0MB/s over the watch: ██▁▁ (0–100MB/s)" in text
    assert "3 data files held open or mapped (3.0GB), 100% in the page cache at the end" in text
    assert storage_line(RunReport.from_dict(json.loads(
        (Path(__file__).resolve().parent.parent / "data" / "run" / "train_w2.json").read_text()))) is None


def test_a_file_open_for_writing_is_not_data(tmp_path: Path) -> None:
    written = tmp_path / "train.log"
    with open(written, "a"):
        assert str(written) not in held_paths([os.getpid()], maps=False)
