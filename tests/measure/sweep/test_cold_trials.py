"""Trials as cold as a training process: how each gets its dataset, failures every config shares, and
memory figures that tell copies of the parent's pages from pages of memory-mapped files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dataprof.measure.probes import mapping_ranges, smaps_memory
from dataprof.measure.sweep import runner
from tests.conftest import Invoke


@pytest.fixture
def quick(quick: list[str]) -> list[str]:
    """The shortest trials, of exactly the configs asked for."""
    return [*quick, "--strategy", "grid", "--no-rules-of-thumb"]


SMAPS = """\
00400000-00500000 r-xp 00000000 fe:00 1234                       /usr/bin/python3
Private_Clean:      1024 kB
Private_Dirty:         8 kB
01000000-02000000 rw-p 00000000 00:00 0                          [heap]
Private_Clean:         0 kB
Private_Dirty:      4096 kB
7f0000000000-7f0000100000 rw-p 00000000 00:00 0
Private_Clean:         0 kB
Private_Dirty:       512 kB
7f1000000000-7f1010000000 r--s 00000000 fe:00 99                          /data/table.arrow
Private_Clean:     20480 kB
Private_Dirty:       100 kB
7f2000000000-7f2000100000 rw-s 00000000 00:01 77                          /dev/shm/torch_1
Private_Clean:         0 kB
Private_Dirty:       256 kB
"""


def test_private_pages_tell_copies_of_the_parent_from_file_pages_and_new_memory() -> None:
    parent = mapping_ranges("00400000-00500000 r-xp 0 fe:00 1234 /usr/bin/python3\n"
                            "01000000-01800000 rw-p 0 00:00 0 [heap]\n"
                            "7f2000000000-7f2000100000 rw-s 0 00:01 77 /dev/shm/torch_1\n")
    pages = smaps_memory(SMAPS, parent)[2]
    # the heap starts in the parent's heap: its dirty pages are the parent's, copied, and so are the binary's
    # written pages; the binary's clean pages and the shared mapping of a file (dirty too: written, not yet
    # on disk) are the file's; the anonymous mapping and the shared-memory tensor are the worker's own
    assert pages.inherited == (4096 + 8) * 1024
    assert pages.file == (1024 + 20480 + 100) * 1024
    assert pages.new == (512 + 256) * 1024
    alone = smaps_memory(SMAPS, [])[2]
    assert alone.inherited == 0 and alone.new == (8 + 4096 + 512 + 256) * 1024


def test_a_workers_smaps_gives_its_uss_and_pss_as_psutil_reads_them() -> None:
    uss, pss, _ = smaps_memory(SMAPS.replace("Private_Dirty:       512 kB", "Private_Dirty:       512 kB\n"
                                             "Pss:                 300 kB\nPss_Dirty:           300 kB"), [])
    assert (uss, pss) == ((1024 + 8 + 4096 + 512 + 20480 + 100 + 256) * 1024, 300 * 1024)
    if not os.path.exists("/proc/self/smaps_rollup"):
        return
    import psutil

    with open("/proc/self/smaps") as handle:
        mine = smaps_memory(handle.read(), [])
    theirs = psutil.Process().memory_full_info()
    assert mine[0] == pytest.approx(theirs.uss, rel=0.05) and mine[1] == pytest.approx(theirs.pss, rel=0.05)


@pytest.mark.slow
def test_a_dataset_that_a_forked_process_cannot_reuse_after_iterating_it_sweeps(tmp_path: Path, cli: Invoke,
                                                                                datasets: str,
                                                                                quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:RefusesAfterParentIterated", "--batch-size", "8", "--workers", "0,2",
                          *quick, "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert [t["status"] for t in doc["trials"]] == ["ok", "ok"]
    assert doc["dataset"]["build"] == "per_trial"
    assert all(t["build_s"] is not None for t in doc["trials"])
    assert any("every trial builds the dataset" in note for note in doc["notes"])


@pytest.mark.slow
def test_a_shared_dataset_that_fails_where_its_own_would_not_makes_every_trial_build_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Invoke, datasets: str, quick: list[str]) -> None:
    monkeypatch.setattr(runner, "SHARE_BUILD_S", 0.3)
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:OwnedByBuilder", "--batch-size", "8", "--workers", "0,2", *quick,
                          "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert [t["status"] for t in doc["trials"]] == ["ok", "ok"]
    assert doc["dataset"]["build"] == "per_trial"
    note = next(n for n in doc["notes"] if "every trial builds the dataset" in n)
    assert "w2 pf2 persist forked from the process that built it ended failed" in note
    assert "opened in process" in note and "completed when the trial built its own" in note


@pytest.mark.slow
def test_a_dataset_slow_to_build_is_built_once_and_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Invoke,
                                                           datasets: str, quick: list[str]) -> None:
    monkeypatch.setattr(runner, "SHARE_BUILD_S", 0.3)
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:SlowToBuild", "--batch-size", "8", "--workers", "0,2,3", *quick,
                          "--json", str(out))
    assert code == 0, stderr
    doc = json.loads(out.read_text())
    assert doc["dataset"]["build"] == "once"
    first, *later = doc["trials"]
    assert first["build_s"] >= 0.5 and [t["build_s"] for t in later] == [None, None]
    assert [t["status"] for t in doc["trials"]] == ["ok"] * 3
    assert any("it is built once" in note for note in doc["notes"])


@pytest.mark.slow
def test_a_failure_in_every_config_is_a_target_error_within_one_trial(tmp_path: Path, cli: Invoke, datasets: str,
                                                                      quick: list[str]) -> None:
    out = tmp_path / "run.json"
    code, stdout, stderr = cli("sweep", f"{datasets}:HangsAfterFirstBatch", "--batch-size", "8", "--workers", "0,2,4",
                               *quick, "--trial-timeout", "3", "--json", str(out))
    assert code == 3, stderr
    assert "the first trial (w0) hung, so every config would: no batch for 3 s" in stderr
    assert "Traceback" not in stdout + stderr
    doc = json.loads(out.read_text())
    assert len(doc["trials"]) == 1 and doc["error"].startswith("the first trial (w0) hung")


@pytest.mark.slow
def test_a_first_batch_that_never_comes_is_a_target_error_not_a_hang(cli: Invoke, datasets: str,
                                                                     quick: list[str]) -> None:
    import psutil

    code, _, stderr = cli("sweep", f"{datasets}:HangsFromTheStart", "--batch-size", "8", *quick, "--trial-timeout", "2")
    assert code == 3, stderr
    assert "the first batch of 8 did not come in 2 s (--trial-timeout) after the dataset was built" in stderr
    time.sleep(0.5)
    assert not [p for p in psutil.Process().children(recursive=True) if p.is_running()]


@pytest.mark.slow
def test_a_dataset_that_cannot_load_still_writes_the_json(tmp_path: Path, cli: Invoke, datasets: str) -> None:
    out = tmp_path / "run.json"
    code, _, stderr = cli("sweep", f"{datasets}:BadInit", "--json", str(out))
    assert code == 3 and "raised FileNotFoundError" in stderr
    doc = json.loads(out.read_text())
    assert doc["trials"] == [] and "raised FileNotFoundError" in doc["error"]


def _copy_on_read(doc: dict) -> dict | None:
    return next((f for f in doc["diagnosis"]["findings"] if f["id"] == "copy_on_read"), None)


def _read_sweep(cli: Invoke, target: str, *args: str, reading: str, out: Path) -> dict:
    """The sweep's JSON, swept once more if its w2 trial's ``reading`` was not taken: a mark skips the workers'
    pages when a reading costs more than its budget, as it may on a busy machine (a null, never a number)."""
    for _ in range(2):
        code, _, stderr = cli("sweep", target, *args, "--json", str(out))
        assert code == 0, stderr
        doc = json.loads(out.read_text())
        if next(t for t in doc["trials"] if t["config"]["num_workers"] == 2)[reading] is not None:
            break
    return doc


@pytest.mark.slow
def test_copy_on_read_fires_on_python_records_and_not_on_a_memory_mapped_file(tmp_path: Path, cli: Invoke,
                                                                                  datasets: str) -> None:
    if not os.path.exists("/proc/self/smaps"):
        pytest.skip("needs /proc/PID/smaps")
    common = ["--batch-size", "16", "--workers", "0,2", "--step-ms", "2", "--strategy", "grid",
              "--no-rules-of-thumb", "--prefetch-factor", "2", "--trial-seconds", "2"]
    records = _read_sweep(cli, f"{datasets}:Records", *common, reading="workers_inherited_growth_bytes",
                          out=tmp_path / "records.json")
    finding = _copy_on_read(records)
    assert finding is not None and "copied" in finding["evidence"]
    doc = _read_sweep(cli, f"{datasets}:MemmapRows", "--arg", f"path={tmp_path / 'rows.npy'}", *common,
                      reading="workers_file_growth_bytes", out=tmp_path / "mapped.json")
    assert _copy_on_read(doc) is None, doc["diagnosis"]
    w2 = next(t for t in doc["trials"] if t["config"]["num_workers"] == 2)
    assert w2["workers_file_growth_bytes"] > 8 * 2**20  # the workers did read the file in the window
    assert w2["workers_file_growth_bytes"] > 4 * w2["workers_inherited_growth_bytes"]
