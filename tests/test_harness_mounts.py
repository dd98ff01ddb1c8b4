"""The end-to-end tests' teardown leaves no mount behind (``harness.release_mounts``): a
checkpoint volume a killed worker left mounted (a real loop-mounted ext4 image, root) is
unmounted and its loop device freed, so pytest can delete the temporary directory."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpum_worker.runtime_disk import ScratchVolumes, mount_points
from harness import release_mounts


def _mounts() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return mount_points(f.read())


def _loops_of(folder: Path) -> list[str]:
    root = str(folder.resolve())
    return [b.parent.parent.name for b in Path("/sys/block").glob("loop*/loop/backing_file")
            if b.read_text().strip().startswith(root)]


def test_a_volume_left_mounted_is_released_and_the_folder_removable(tmp_path: Path) -> None:
    work = tmp_path / "work"
    volumes = ScratchVolumes(work / "checkpoints")
    path = volumes.ensure("job", 4)
    nested = ScratchVolumes(Path(path) / "inner").ensure("x", 4)  # deepest goes first
    Path(nested, "file").write_text("data")
    other = ScratchVolumes(tmp_path / "elsewhere").ensure("kept", 4)
    try:
        assert {path, nested} <= _mounts() and _loops_of(work)
        assert sorted(release_mounts(work)) == sorted([path, nested])
        assert path not in _mounts() and nested not in _mounts() and other in _mounts()
        assert _loops_of(work) == []
        shutil.rmtree(work)  # what pytest's cleanup of old temporary directories does
        assert release_mounts(work) == []
    finally:
        ScratchVolumes(tmp_path / "elsewhere").release("kept")
