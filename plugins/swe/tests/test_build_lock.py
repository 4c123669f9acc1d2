"""Two builders of one image tag take turns (``skyrl_swe.images.tag_lock``): two instances of one repository
version share an environment image, and building its tag twice at once left the first image dangling (seen in CI:
``test_eval_of_two_generated_instances_in_docker`` failed its leak check)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from skyrl_swe.images import tag_lock


def test_threads_building_one_tag_take_turns_and_other_tags_do_not_wait(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYRL_SWE_CACHE", str(tmp_path))
    inside: list[str] = []
    overlaps: list[tuple[str, str]] = []
    guard = threading.Lock()

    def build(name: str, tag: str) -> None:
        with tag_lock(tag):
            with guard:
                overlaps.extend((name, other) for other in inside)
                inside.append(name)
            time.sleep(0.2)
            with guard:
                inside.remove(name)

    threads = [threading.Thread(target=build, args=(f"a{i}", "skyrl-swe-env:same")) for i in range(3)]
    threads.append(threading.Thread(target=build, args=("b", "skyrl-swe-env:other")))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    same = [pair for pair in overlaps if pair[0].startswith("a") and pair[1].startswith("a")]
    assert same == []  # never two builders of one tag at once
    assert overlaps, "the builder of another tag never ran beside them: the lock is not per tag"


def test_a_second_process_waits_for_the_tag_and_is_not_blocked_after(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYRL_SWE_CACHE", str(tmp_path))
    child = ("import time; from skyrl_swe.images import tag_lock\n"
             "t0 = time.monotonic()\n"
             "with tag_lock('skyrl-swe/x:1'):\n"
             "    print(round(time.monotonic() - t0, 2))\n")
    with tag_lock("skyrl-swe/x:1"):
        proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "SKYRL_SWE_CACHE": str(tmp_path)})
        time.sleep(1.5)
        assert proc.poll() is None  # still waiting for this process's lock
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and float(out) >= 1.0
    with tag_lock("skyrl-swe/x:1"):  # released by the child: taken again at once
        pass


def test_a_hostile_tag_cannot_put_its_lock_file_outside_the_lock_folder(tmp_path, monkeypatch):
    """Attack: a tag comes from row data (instance ids, repository names) an agent-facing dataset may carry. A tag
    with path parts, a newline or a huge length still locks one hashed file inside the lock folder."""
    monkeypatch.setenv("SKYRL_SWE_CACHE", str(tmp_path / "cache"))
    hostile = ["../../outside", "/etc/passwd", "skyrl-swe/a:b\n../x", "x" * 5000]
    for tag in hostile:
        with tag_lock(tag):
            pass
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert len(made) == len(hostile)
    for path in made:
        assert path.parent.as_posix() == "cache/build-locks" and len(path.name) == len("0" * 32 + ".lock")
    assert not (tmp_path / "outside").exists()
