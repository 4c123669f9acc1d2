"""The OSWorld adapter: task configs validated by the schema; the osworld runtime against the real HTTP bridge
(desktop_server.py) serving a small fake DesktopEnv-shaped environment on 127.0.0.1. The fake is a stand-in
for a VM image this machine cannot download; everything between the agent and it is the real code."""

from __future__ import annotations

import json
import threading

import pytest

from skyrl_core.errors import ConfigError
from skyrl_core.runtime import RuntimeSpec
from skyrl_core.tasks import DataSpec, Instance
from skyrl_core.tools import ToolContext
from skyrl_core.transitions import Trajectory
from skyrl_osworld.desktop_server import DesktopBridge, make_server
from skyrl_osworld.osworld import OSWorldRuntime, linearize_a11y, load_task_configs, validate_task_config
from skyrl_osworld.tools import osworld_action_tool
from skyrl_osworld.verifiers import ERROR_RUNTIME, osworld_evaluate

TASK = {
    "id": "skyrl-demo-0001",
    "snapshot": "init_state",
    "instruction": "Press the Save button in the dialog.",
    "source": "written for skyrl's tests",
    "config": [{"type": "launch", "parameters": {"command": ["gedit"]}}],
    "related_apps": ["gedit"],
    "evaluator": {"func": "check_saved", "result": {"type": "vm_file", "path": "/home/user/a.txt"},
                  "expected": {"type": "rule", "rules": {"include": ["a"]}}, "postconfig": []},
}

A11Y = """<desktop-frame xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">
  <dialog name="Save file" cp:screencoord="(100, 100)" cp:size="(400, 200)">
    <push-button name="Save" cp:screencoord="(380, 260)" cp:size="(80, 30)"/>
    <push-button name="Cancel" cp:screencoord="(280, 260)" cp:size="(80, 30)"/>
    <label name="offscreen" cp:screencoord="(5000, 5000)" cp:size="(10, 10)"/>
  </dialog>
</desktop-frame>"""

PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


class FakeDesktopEnv:
    """DesktopEnv's interface (reset/step/evaluate/close, step reward always 0): a dialog whose Save button is
    'pressed' by a click inside its box; evaluate() is 1.0 once it was."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.saved = False
        self.task = None
        self.closed = False

    def _obs(self):
        return {"screenshot": PNG, "accessibility_tree": A11Y, "instruction": self.task["instruction"]}

    def reset(self, task_config=None):
        self.task, self.saved, self.actions = task_config, False, []
        return self._obs()

    def step(self, action, pause=2):
        self.actions.append(action)
        for line in action.splitlines():
            if line.startswith("pyautogui.click(x="):
                x, y = (float(v.split("=")[1]) for v in line[len("pyautogui.click("):].split(", ")[:2])
                self.saved = self.saved or (380 <= x <= 460 and 260 <= y <= 290)
        return self._obs(), 0, action in ("DONE", "FAIL"), {"step": len(self.actions)}

    def evaluate(self):
        return 1.0 if self.saved else 0.0

    def close(self):
        self.closed = True


@pytest.fixture
def bridge():
    env = FakeDesktopEnv()
    server = make_server(DesktopBridge(lambda: env), "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield env, f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()


async def started(url: str) -> tuple[OSWorldRuntime, Instance]:
    """A runtime on the bridge at ``url``, reset to TASK."""
    inst = Instance(id=TASK["id"], data=TASK)
    rt = OSWorldRuntime(RuntimeSpec(type="osworld", options={"servers": [url], "pause_s": 0,
                                                             "screen": [1920, 1080]}))
    await rt.start()
    await rt.prepare(inst)
    return rt, inst


def test_schema_accepts_osworld_configs_and_names_the_culprit(tmp_path):
    assert validate_task_config(TASK) is TASK
    bad = json.loads(json.dumps(TASK))
    del bad["evaluator"]["func"]
    with pytest.raises(ConfigError, match=r"at evaluator: 'func' is a required property"):
        validate_task_config(bad)
    bad = dict(TASK, config=[{"parameters": {}}])
    with pytest.raises(ConfigError, match=r"at config/0: 'type' is a required"):
        validate_task_config(bad)
    bad = dict(TASK, evaluator=dict(TASK["evaluator"], conj="xor"))
    with pytest.raises(ConfigError, match=r"evaluator/conj"):
        validate_task_config(bad)
    multi = dict(TASK, evaluator=dict(TASK["evaluator"], func=["a", "b"], conj="and",
                                      result=[{"type": "x"}, {"type": "y"}]))
    assert validate_task_config(multi) is multi
    # OSWorld's layout: evaluation_examples/examples/<app>/<id>.json
    (tmp_path / "gedit").mkdir()
    (tmp_path / "gedit" / "t1.json").write_text(json.dumps(TASK))
    (tmp_path / "gedit" / "t2.json").write_text(json.dumps(dict(TASK, id="t2")))
    assert [i.id for i in load_task_configs(DataSpec(path=str(tmp_path)))] == ["skyrl-demo-0001", "t2"]
    (tmp_path / "gedit" / "t3.json").write_text(json.dumps({"id": "t3"}))
    with pytest.raises(ConfigError, match=r"t3.json: not an OSWorld task config at \(root\): 'instruction'"):
        load_task_configs(DataSpec(path=str(tmp_path)))


def test_a11y_xml_becomes_the_text_view():
    view = linearize_a11y(A11Y, 1920, 1080)
    assert view.splitlines() == ['[1] dialog "Save file" @(300,200) 400x200',
                                 '[2] push-button "Save" @(420,275) 80x30',
                                 '[3] push-button "Cancel" @(320,275) 80x30']
    assert linearize_a11y("<not xml", 10, 10).startswith("(accessibility tree unreadable")


async def test_an_episode_through_the_bridge_gets_evaluate_s_reward(bridge):
    env, url, _ = bridge
    rt, inst = await started(url)
    try:
        assert rt.instruction == TASK["instruction"] and '"Save" @(420,275)' in rt.first_view
        ctx = ToolContext(runtime=rt, instance=inst)
        t = Trajectory(instance_id=inst.id, sample_index=0, task="osworld", group_id=inst.id)
        assert (await osworld_evaluate(t, rt, inst)).reward == 0.0
        waited = await osworld_action_tool.call({"action": {"action_type": "WAIT"}}, ctx)   # computer_13 form
        assert not waited.finish and env.actions == ["WAIT"]
        env.actions.clear()
        result = await osworld_action_tool.call({"code": "pyautogui.click(420, 275)\nDONE"}, ctx)
        assert result.finish and result.answer == "DONE"
        assert '[2] push-button "Save"' in result.output
        # the desktop received canonical code re-emitted from the parsed actions, then DONE on its own
        assert env.actions == ["pyautogui.click(x=420, y=275, button='left', clicks=1)", "DONE"]
        verdict = await osworld_evaluate(t, rt, inst)
        assert verdict.reward == 1.0 and verdict.metrics == {"success": 1.0, "osworld_task": TASK["id"]}
    finally:
        await rt.close()


async def test_agent_code_never_reaches_the_desktop(bridge, tmp_path):
    env, url, _ = bridge
    rt, inst = await started(url)
    try:
        for code in ("__import__('os').system('rm -rf ~')", "import subprocess\nsubprocess.run(['id'])",
                     "pyautogui.click(420, 275)\nexec('import os')"):
            result = await osworld_action_tool.call({"code": code}, ToolContext(runtime=rt))
            assert result.error and result.output.startswith("Refused, nothing was run")
        assert env.actions == []
        assert (await osworld_evaluate(Trajectory(instance_id="x", sample_index=0, task="osworld", group_id="x"),
                                       rt, inst)).reward == 0.0
    finally:
        await rt.close()


async def test_a_lost_desktop_ends_only_its_trajectory_as_error_runtime(bridge):
    env, url, server = bridge
    rt, inst = await started(url)
    server.shutdown()
    server.server_close()
    result = await osworld_action_tool.call({"code": "pyautogui.click(1, 1)"}, ToolContext(runtime=rt))
    assert result.finish and "unreachable" in result.metadata["runtime_died"]
    t = Trajectory(instance_id=inst.id, sample_index=0, task="osworld", group_id=inst.id)
    lost = await osworld_evaluate(t, rt, inst)
    assert (lost.reward, lost.outcome) == (0.0, "unverifiable") and "unreachable" in lost.reason
    assert t.finish_reason == ERROR_RUNTIME and t.masked
    await rt.close()


def test_the_bridge_reports_bad_requests(bridge):
    import urllib.error
    import urllib.request

    _, url, _ = bridge
    req = urllib.request.Request(f"{url}/step", data=b'{"action": 5}', method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400 and "pyautogui code string" in err.value.read().decode()
    with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
        assert json.loads(resp.read()) == {"ok": True}


def test_the_runtime_needs_servers():
    with pytest.raises(ConfigError, match="runtime.options.servers"):
        OSWorldRuntime(RuntimeSpec(type="osworld"))
