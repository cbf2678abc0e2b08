"""Data files: which files count, the processes' open and mapped files, residency and eviction (``mincore``)."""

from __future__ import annotations

import builtins
import io
import json
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataprof.measure.cache import open_log
from dataprof.measure.cache.files import data_file_size, excluded_roots, filesystem_of, held_paths
from dataprof.measure.cache.footprint import (
    DataFiles,
    dataset_directories,
    dataset_paths,
    files_read,
    files_under,
    footprint,
)
from dataprof.measure.cache.open_log import LoggingWorkerInit, OpenLog
from dataprof.measure.cache.page_cache import can_evict, evict, read_back, residency, resident_bytes

MOUNTS = """/dev/vda / ext4 rw,relatime 0 0
tmpfs /dev/shm tmpfs rw 0 0
nfs:/export /mnt/data nfs4 rw 0 0
tmpfs /mnt/data/scratch tmpfs rw 0 0
"""


def _write(path: Path, size: int) -> Path:
    """A file of ``size`` random bytes, on storage (eviction drops clean pages only)."""
    with open(path, "wb") as handle:
        handle.write(os.urandom(size))
        handle.flush()
        os.fsync(handle.fileno())
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
    mark = _write(tmp_path / "end-mark", 0)
    mine = (os.path.join(str(own), ""), str(mark))
    assert data_file_size(str(data), roots, mine) is not None
    assert data_file_size(str(code), roots, mine) is None
    assert data_file_size(str(log), roots, mine) is None and data_file_size(str(mark), roots, mine) is None
    assert data_file_size(os.__file__, roots) is None  # the standard library, under sys.base_prefix
    assert data_file_size(str(tmp_path), roots) is None  # a directory
    assert data_file_size(str(tmp_path / "gone.npy"), roots) is None
    assert data_file_size("pipe:[1234]", roots) is None


def test_packages_installed_on_the_path_outside_the_interpreter_are_code_not_data(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `pip install --target DIR` or a cluster's shared packages on PYTHONPATH: their data files (time zones,
    # tables) are read at import, never a dataset's; a project directory on the path keeps its data
    packages, project = tmp_path / "packages", tmp_path / "project"
    (packages / "tzdata-2026.1.dist-info").mkdir(parents=True)
    (packages / "tzdata" / "zoneinfo").mkdir(parents=True)
    (project / "data").mkdir(parents=True)
    zone = _write(packages / "tzdata" / "zoneinfo" / "UTC", 10)
    shard = _write(project / "data" / "shard-000.bin", 10)
    (project / "mypkg.egg-info").mkdir()  # an editable install's metadata, read by importlib.metadata
    metadata = _write(project / "mypkg.egg-info" / "PKG-INFO", 10)
    monkeypatch.setattr(sys, "path", [*sys.path, str(packages), str(project)])
    roots = excluded_roots()
    assert data_file_size(str(zone), roots) is None
    assert data_file_size(str(shard), roots) == 10
    assert data_file_size(str(metadata), roots) is None


def test_a_users_directory_named_like_dataprofs_files_holds_data(tmp_path: Path) -> None:
    bench = tmp_path / "dataprof-bench"
    bench.mkdir()
    data = _write(bench / "0.npy", 10)
    files = DataFiles(own={os.path.join(str(tmp_path / "dataprof-opens-1"), "")})
    assert files.add([str(data)]) == {str(data)}  # dataprof's own files are known by their paths, not by name


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


def test_a_paused_log_notes_nothing_in_any_process_that_shares_it(tmp_path: Path) -> None:
    """The switch is a file the log's processes map: a worker's log (here a second install, as a spawned worker
    makes) stops when the trial's pauses it."""
    data = _write(tmp_path / "0.npy", 10)
    main = OpenLog(str(tmp_path))
    main.install()
    worker = OpenLog(str(tmp_path))
    worker.install()  # now the installed one, as in a worker process
    try:
        data.read_bytes()
        paused = main.pause()
        data.read_bytes()
    finally:
        worker.uninstall()
    stamps = [t for t, _ in OpenLog.read(str(tmp_path))]
    assert len(stamps) == 1 and stamps[0] <= paused


def test_files_per_sample_count_the_part_of_the_window_the_log_saw(tmp_path: Path) -> None:
    """Two opens a sample at 100 samples/s in a 3 s window whose log was paused after 0.5 s."""
    data = str(_write(tmp_path / "a.npy", 10))
    opened = [(10.0 + i / 200, data) for i in range(100)]
    found = files_read(DataFiles(), set(), opened, (10.0, 13.0), 100.0, logged_until=10.5)
    assert found["files_per_sample"] == pytest.approx(2.0, rel=0.02)
    assert files_read(DataFiles(), set(), opened, (10.0, 13.0), 100.0)["files_per_sample"] == pytest.approx(1 / 3)


def test_a_cold_trial_evicts_the_dataset_s_files_it_did_not_see_read(tmp_path: Path) -> None:
    """A warm trial logs the start of its window only: the rest of its reads are the data directories' files of
    the kinds read, and dataprof's own files among them are not."""
    for klass in ("cat", "dog"):
        (tmp_path / klass).mkdir()
        for i in range(3):
            _write(tmp_path / klass / f"{i}.jpg", 100)
    _write(tmp_path / "labels.txt", 10)
    own = tmp_path / "dataprof-opens-x"
    own.mkdir()
    _write(own / "mine.jpg", 10)
    files = DataFiles(own={os.path.join(str(own), "")})
    files.add([str(tmp_path / "cat" / "0.jpg"), str(tmp_path / "dog" / "1.jpg")])
    assert dataset_paths(files) == {str(tmp_path / k / f"{i}.jpg"): 100 for k in ("cat", "dog") for i in range(3)}


def test_the_dataset_s_directory_is_walked_once_a_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The footprint and each cold trial's eviction read one walk of the data directory."""
    for i in range(3):
        _write(tmp_path / f"{i}.npy", 10)
    files = DataFiles()
    files.add([str(tmp_path / "0.npy")])
    listed: list[str] = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: (listed.append(path), scandir(path))[1])
    found = footprint(files, page_cache_bytes=10_000)
    assert found is not None and found.files == 3
    for _ in range(2):
        assert len(dataset_paths(files)) == 3
    assert listed == [str(tmp_path)]


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
    assert dataset_directories(read) == {str(tmp_path): sorted(read)}
    jpegs, cut = files_under(str(tmp_path), {".jpg"})
    assert (sum(jpegs.values()), len(jpegs), cut) == (6000, 6, False)
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
    from dataprof.measure.watch.resources import storage_of

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


def test_a_process_leaving_the_tree_with_its_reads_counts_no_negative_reads() -> None:
    from types import SimpleNamespace

    from dataprof.measure.probes import TreeSample
    from dataprof.measure.sampler import Samples
    from dataprof.measure.summary import summarize
    from dataprof.measure.watch.resources import storage_of

    def reading(t: float, read: int) -> TreeSample:
        return TreeSample(t=t, cpu_s=0.0, main_cpu_s=None, main_thread_cpu_s=None, pss_bytes=None,
                          main_uss_bytes=None, workers_uss_bytes=None, processes=2, read_bytes=read, read_chars=read)

    # 10 MB/s throughout; at t=2 a process that had read 50 MB leaves the tree (left running, then killed)
    tree = [reading(0.0, 60_000_000), reading(1.0, 70_000_000), reading(2.0, 30_000_000),
            reading(3.0, 40_000_000), reading(4.0, 50_000_000)]
    figures = storage_of(SimpleNamespace(samples=Samples(tree=tree),  # type: ignore[arg-type]
                                         tree_probe=SimpleNamespace(held=set())))
    assert figures["storage_timeline"] == (10e6, 0, 10e6, 10e6)
    summary = summarize(Samples(tree=tree, window_start=0.0, window_end=4.0))
    assert summary["storage_read_bytes_per_s"] == summary["read_chars_per_s"] == 30e6 / 4


@pytest.mark.slow  # real sleeps: the known cost of its stages or samples
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
    data["resources"].update(storage_timeline=[-5e6, 100e6, 250e6])  # written by hand: still drawn, in its bars
    console.print(storage_line(RunReport.from_dict(data)))
    assert "▁▄█ (0–250MB/s)" in console.export_text()


def test_a_file_open_for_writing_is_not_data(tmp_path: Path) -> None:
    written = tmp_path / "train.log"
    with open(written, "a"):
        assert str(written) not in held_paths([os.getpid()], maps=False)


def test_a_stray_file_in_home_does_not_size_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    data = tmp_path / "mnt" / "shards"
    (home / "work").mkdir(parents=True)
    data.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for i in range(10):
        _write(data / f"{i}.tar", 1000)
    notes = _write(home / "labels.json", 50)
    _write(home / "work" / "unrelated.json", 70_000)  # beside the stray file, never walked
    read = [str(data / "0.tar"), str(data / "1.tar"), str(notes)]
    assert dataset_directories(read) == {None: [str(notes)], str(data): read[:2]}
    files = DataFiles()
    files.add(read)
    found = footprint(files, page_cache_bytes=100_000)
    assert found is not None
    # the shards' directory is walked; the annotation counts for itself: 10 × 1000 + 50
    assert (found.bytes, found.files, found.directory) == (10_050, 11, str(data))


def test_the_walk_checks_its_limits_entry_by_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listed = []
    real_scandir = os.scandir

    class Entries:
        def __init__(self, path: str) -> None:
            self.path = path

        def __enter__(self) -> Entries:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def __iter__(self) -> Iterator[os.DirEntry[str]]:
            with real_scandir(self.path) as inner:
                for entry in inner:
                    listed.append(entry.name)
                    yield entry

    for i in range(50):
        _write(tmp_path / f"{i}.npy", 10)
    monkeypatch.setattr(os, "scandir", Entries)
    assert files_under(str(tmp_path), {".npy"}, limit=5)[1] is True
    assert len(listed) <= 6  # a huge directory is never listed whole before its limits are checked


def test_a_fifo_swapped_in_for_a_data_file_is_skipped_not_waited_on(tmp_path: Path) -> None:
    import threading

    fifo = tmp_path / "0.npy"
    os.mkfifo(fifo)
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(evict([str(fifo)])), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "evicting a FIFO blocked on its open"
    eviction = done[0]
    assert eviction.files == 0 and "not a regular file" in eviction.skipped[0]  # type: ignore[attr-defined]
    assert resident_bytes(str(fifo)) is None


def test_a_link_is_resolved_and_its_file_evicted(tmp_path: Path) -> None:
    target = _write(tmp_path / "blob", 8192)
    link = tmp_path / "0.npy"
    link.symlink_to(target)
    assert evict([str(link)]).files == 1


def test_eviction_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("eviction wrote a file back")

    monkeypatch.setattr(os, "fdatasync", refuse)
    monkeypatch.setattr(os, "fsync", refuse)
    dirty = tmp_path / "data.mdb"
    dirty.write_bytes(os.urandom(256 * 1024))  # written moments ago: its pages are still dirty
    done = evict([str(dirty)])
    assert done.files == 1 and not done.skipped


class Ticks:
    """A clock that moves ``step`` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_eviction_and_residency_are_bounded_in_time(tmp_path: Path) -> None:
    paths = [str(_write(tmp_path / f"{i}.npy", 4096)) for i in range(20)]
    done = evict(paths, budget_s=10.0, clock=Ticks(1.0))
    assert 0 < done.files < 20 and done.skipped[-1].endswith("files not reached: the eviction's 10 s ran out")
    resident, size = residency(paths, budget_s=5.0, clock=Ticks(1.0))
    assert 0 < size < 20 * 4096


def test_files_read_back_are_in_the_page_cache_again(tmp_path: Path) -> None:
    if not _evictable(tmp_path):
        pytest.skip(f"{tmp_path} is on {filesystem_of(str(tmp_path))}: eviction has no effect there")
    paths = [str(_write(tmp_path / f"{i}.npy", 128 * 1024)) for i in range(4)]
    for path in paths:
        Path(path).read_bytes()
    eviction = evict(paths)
    assert sorted(eviction.cached_before) == sorted(paths)
    assert all(resident_bytes(p) == (0, 128 * 1024) for p in paths)
    back = read_back(eviction.cached_before)
    assert (back.files, back.bytes, back.left_files) == (4, 4 * 128 * 1024, 0)
    assert all(resident_bytes(p) == (128 * 1024, 128 * 1024) for p in paths)
    assert read_back(paths, budget_s=-1.0).left_files == 4  # out of time: left as they are, and said


def test_the_open_log_registers_one_fork_handler_however_often_installed(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(os, "register_at_fork", lambda **kw: registered.append(kw))
    monkeypatch.setattr(open_log, "_fork_handler", False)
    for _ in range(3):
        log = OpenLog(str(tmp_path))
        log.install()
        log.uninstall()
    assert len(registered) == 1


def test_notes_made_while_the_log_flushes_are_kept(tmp_path: Path) -> None:
    import threading

    log = OpenLog(str(tmp_path))
    count = 20_000
    writer = threading.Thread(target=lambda: [log.note(f"/data/{i}.npy") for i in range(count)])
    writer.start()
    while writer.is_alive():
        log.flush()
    log.flush()
    assert len(OpenLog.read(str(tmp_path))) == count


def test_a_worker_that_was_not_forked_installs_the_log_itself(tmp_path: Path) -> None:
    import pickle

    seen: list[int] = []
    data = _write(tmp_path / "0.npy", 10)
    logs = tmp_path / "opens"
    logs.mkdir()
    init = LoggingWorkerInit(str(logs), seen.append)
    assert pickle.loads(pickle.dumps(LoggingWorkerInit(str(logs)))).directory == str(logs)  # as spawn sends it
    init(3)
    with open(data, "rb"):
        pass
    assert open_log._installed is not None
    open_log._installed.uninstall()
    assert seen == [3] and [path for _, path in OpenLog.read(str(logs))] == [str(data)]


def test_the_open_log_sees_every_open_for_reading_however_the_caller_holds_open(tmp_path: Path) -> None:
    import _io

    data, out = _write(tmp_path / "0.npy", 10), tmp_path / "out.txt"
    kept = _io.open  # as a library that took its own reference before the log was installed
    log = OpenLog(str(tmp_path / "opens"))
    (tmp_path / "opens").mkdir()
    log.install()
    try:
        kept(data, "rb").close()
        os.close(os.open(data, os.O_RDONLY))
        data.read_bytes()
        out.write_text("written, not read")
        kept(out, "r+").close()
    finally:
        log.uninstall()
    data.read_bytes()  # after: not logged
    assert [path for _, path in OpenLog.read(str(tmp_path / "opens"))] == [str(data)] * 3


def test_without_posix_fadvise_there_is_no_cold_pass_and_it_says_why(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dataprof.measure.inspect.reads import Logged, storage_reads

    monkeypatch.delattr(os, "posix_fadvise")
    assert "no posix_fadvise" in (can_evict() or "")
    data = _write(tmp_path / "0.npy", 4096)
    reads = storage_reads(Logged(opened=[(0.0, str(data))]), 1, 0.1, lambda i: data.read_bytes(), [0])
    assert reads is not None and reads.cold is None and reads.note is not None
    assert reads.note.startswith("no cold pass: this platform has no posix_fadvise")
